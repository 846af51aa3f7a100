//! What an unpickled state dict names: its tensors (key paths joined by
//! `.`), the globals it imports, and its other values as metadata.

use super::*;

/// The tensors and globals of one pickle (a zip archive's `data.pkl`),
/// with no storage located: for the fuzz target and tests of the machine.
///
/// # Errors
/// As [`pickle::unpickle`].
pub fn pickle_tensors(
    data: &[u8],
) -> Result<(Vec<TorchTensor>, Vec<Imported>), pickle::PickleError> {
    let unpickled = pickle::unpickle(data, Persistent::Zip)?;
    let listed = list(&unpickled, data.len());
    Ok((listed.tensors, imported(&unpickled)))
}

pub(super) fn imported(u: &Unpickled) -> Vec<Imported> {
    u.globals
        .iter()
        .map(|g| Imported {
            global: g.clone(),
            safety: verdict::classify(g),
        })
        .collect()
}

/// The safetensors dtype of a torch storage type, with its element bytes.
#[must_use]
pub fn storage_dtype(kind: &str) -> Option<Dtype> {
    Some(match kind {
        "FloatStorage" => Dtype::F32,
        "DoubleStorage" => Dtype::F64,
        "HalfStorage" => Dtype::F16,
        "BFloat16Storage" => Dtype::BF16,
        "LongStorage" => Dtype::I64,
        "IntStorage" => Dtype::I32,
        "ShortStorage" => Dtype::I16,
        "CharStorage" => Dtype::I8,
        "ByteStorage" | "UntypedStorage" => Dtype::U8,
        "BoolStorage" => Dtype::BOOL,
        "UInt16Storage" => Dtype::U16,
        "UInt32Storage" => Dtype::U32,
        "UInt64Storage" => Dtype::U64,
        "ComplexFloatStorage" => Dtype::C64,
        "Float8_e4m3fnStorage" => Dtype::F8_E4M3,
        "Float8_e5m2Storage" => Dtype::F8_E5M2,
        _ => return None,
    })
}

/// What walking the pickle's value found.
#[derive(Default)]
pub(super) struct Listed {
    /// The tensors, in the pickle's order.
    pub(super) tensors: Vec<TorchTensor>,
    /// Storage key → bytes its tensors need, in first-seen order.
    pub(super) storages: Vec<(String, u64)>,
    /// Storage key → element bytes.
    pub(super) storage_kinds: Vec<(String, u64)>,
    /// The non-tensor values, by key path.
    pub(super) metadata: BTreeMap<String, String>,
    /// What was left out (past the limits), said.
    pub(super) skipped: Vec<String>,
    /// What may still be listed, in bytes of names, values and axes
    /// ([`listing_budget`]); `None` once it ran out.
    budget: Option<u64>,
    /// Values not listed once the budget ran out.
    unlisted: u64,
    /// Key paths cut to [`MAX_NAME_BYTES`] so far (each such name ends in
    /// its number, so cut names stay apart).
    cut_names: u64,
}

/// The most bytes of a key path (a tensor's name, a metadata key): past
/// it the path is cut, marked `…`, and numbered.
pub const MAX_NAME_BYTES: usize = 1024;

/// What one pickle of `pickle_bytes` may list in all, in bytes: names,
/// values and 16 bytes an axis, with 128 bytes more a tensor for what
/// every listed tensor prints besides (dtype, storage, offsets). A pickle
/// can name one long key or one big shape from many places for a byte or
/// two each (its memo, `DUP`); what is built from them is bounded by what
/// was read: four times the pickle and 1 MiB, far above what a real state
/// dict needs (about 250 bytes a tensor listed, for 100-200 bytes of
/// pickle).
#[must_use]
pub fn listing_budget(pickle_bytes: usize) -> u64 {
    (pickle_bytes as u64)
        .saturating_mul(4)
        .saturating_add(1 << 20)
}

impl Listed {
    /// Takes `cost` bytes from the budget; false (and the value counted as
    /// not listed) when it has run out.
    fn spend(&mut self, cost: u64) -> bool {
        match self.budget {
            Some(left) if left >= cost => {
                self.budget = Some(left - cost);
                true
            }
            _ => {
                self.budget = None;
                self.unlisted += 1;
                false
            }
        }
    }

    /// The name listed for `path`: itself, or, cut at [`MAX_NAME_BYTES`]
    /// (its last character `…`), with its number among the cut ones.
    fn name_of<'p>(&mut self, path: &'p str) -> std::borrow::Cow<'p, str> {
        if is_cut(path) {
            self.cut_names += 1;
            std::borrow::Cow::Owned(format!("{path}#{}", self.cut_names))
        } else {
            std::borrow::Cow::Borrowed(path)
        }
    }

    /// Says what the bounds left out, once, at the end of the listing.
    fn said_bounds(&mut self, pickle_bytes: usize) {
        if self.cut_names > 0 {
            self.skipped.push(format!(
                "{} key paths longer than {MAX_NAME_BYTES} bytes are cut (ending in `{CUT}#N`)",
                self.cut_names
            ));
        }
        if self.unlisted > 0 {
            self.skipped.push(format!(
                "{} values are not listed: what a pickle of {pickle_bytes} bytes lists is bounded at {} bytes of names, values and shapes",
                self.unlisted,
                listing_budget(pickle_bytes)
            ));
        }
    }
}

/// The mark at the end of a key path that was cut.
const CUT: char = '\u{2026}';

impl Listed {
    /// The file read: these tensors over `storages`, the globals `object`
    /// imports, its pickle's size and the archive's version.
    pub(super) fn into_file(
        self,
        format: TorchFormat,
        storages: Vec<Storage>,
        object: &Unpickled,
        pickle_bytes: u64,
        version: Option<String>,
    ) -> TorchFile {
        TorchFile {
            format,
            tensors: self.tensors,
            storages,
            globals: imported(object),
            metadata: self.metadata,
            skipped: self.skipped,
            pickle_bytes,
            version,
        }
    }
}

pub(super) fn list(u: &Unpickled, pickle_bytes: usize) -> Listed {
    let mut out = Listed {
        budget: Some(listing_budget(pickle_bytes)),
        ..Listed::default()
    };
    let mut positions: BTreeMap<String, usize> = BTreeMap::new();
    // Storages named by persistent ids, even those no listed tensor uses
    // (the legacy file's storage section needs every element size).
    let mut visited = vec![false; u.nodes.len()];
    if let Some(root) = &u.root {
        walk(
            u,
            root,
            &mut String::new(),
            0,
            &mut visited,
            &mut |path, value| {
                visit(path, value, &mut out, &mut positions);
            },
        );
    }
    out.said_bounds(pickle_bytes);
    if u.globals_unlisted > 0 {
        out.skipped.push(format!(
            "{} more globals are not listed (past {}; one of each class is, so the verdict stands)",
            u.globals_unlisted,
            pickle::MAX_GLOBALS
        ));
    }
    out
}

pub(super) fn visit(
    path: &str,
    value: &Value,
    out: &mut Listed,
    positions: &mut BTreeMap<String, usize>,
) {
    let axes = match value {
        Value::Tensor(t) => t.shape.len() + t.stride.len(),
        _ => 0,
    };
    let cost = match value {
        Value::Tensor(_) => 128,
        Value::Storage(_) => 0,
        _ => MAX_VALUE_CHARS as u64,
    } + path.len() as u64
        + 16 * axes as u64;
    if !out.spend(cost) {
        return;
    }
    let name = out.name_of(path);
    let path: &str = &name;
    match value {
        Value::Tensor(t) => {
            let Some(dtype) = storage_dtype(&t.storage.kind) else {
                out.skipped.push(format!(
                    "{path}: storage type {} is not decoded",
                    t.storage.kind
                ));
                return;
            };
            let size = dtype.bits().div_ceil(8);
            let tensor_at = |storage| TorchTensor {
                name: path.to_owned(),
                dtype,
                shape: t.shape.clone(),
                stride: t.stride.clone(),
                offset: t.offset,
                storage,
            };
            let key = t.storage.key.to_string();
            let storage = *positions.entry(key.clone()).or_insert_with(|| {
                out.storages.push((key.clone(), 0));
                out.storage_kinds.push((key.clone(), size));
                out.storages.len() - 1
            });
            let tensor = tensor_at(storage);
            let Some(needed) = tensor
                .reach()
                .and_then(|(_, end)| end.max(t.storage.numel).checked_mul(size))
            else {
                out.skipped
                    .push(format!("{path}: its shape and strides overflow"));
                return;
            };
            if let Some(s) = out.storages.get_mut(storage) {
                s.1 = s.1.max(needed);
            }
            out.tensors.push(tensor);
        }
        Value::Storage(s) => {
            if let Some(dtype) = storage_dtype(&s.kind) {
                let key = s.key.to_string();
                if !out.storage_kinds.iter().any(|(k, _)| *k == key) {
                    out.storage_kinds.push((key, dtype.bits().div_ceil(8)));
                }
            }
        }
        Value::Opaque(what) => {
            let line = format!("{path}: made by `{what}`, which is not called");
            if out.skipped.len() < MAX_METADATA && !out.skipped.contains(&line) {
                out.skipped.push(line);
            }
        }
        scalar => {
            if out.metadata.len() < MAX_METADATA
                && let Some(text) = scalar_text(scalar)
            {
                out.metadata.insert(path.to_owned(), text);
            }
        }
    }
}

/// A scalar in one short line (`None` for containers).
pub(super) fn scalar_text(value: &Value) -> Option<String> {
    let text = match value {
        Value::None => "None".to_owned(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        Value::Int(i) => i.to_string(),
        Value::BigInt => "(an integer over 64 bits)".to_owned(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.chars().take(MAX_VALUE_CHARS).collect(),
        Value::Bytes(n) => format!("({n} bytes)"),
        Value::Global(g) => g.to_string(),
        _ => return None,
    };
    Some(text)
}

/// Calls `f(path, leaf)` for every value under `value` that is not a dict,
/// list or tuple, with its key path joined by `.`. Each container is
/// visited once (a pickle may refer to one from two places, or to itself).
pub(super) fn walk(
    u: &Unpickled,
    value: &Value,
    path: &mut String,
    depth: usize,
    visited: &mut [bool],
    f: &mut dyn FnMut(&str, &Value),
) {
    let enter = |visited: &mut [bool], id: pickle::NodeId| {
        let slot = visited.get_mut(id as usize);
        match slot {
            Some(seen) if !*seen => {
                *seen = true;
                true
            }
            _ => false,
        }
    };
    match value {
        Value::Dict(id) if depth < MAX_DEPTH => {
            if !enter(visited, *id) {
                return;
            }
            for (k, v) in u.pairs(*id) {
                let number;
                let key: &str = match k {
                    Value::Str(s) => s,
                    Value::Int(i) => {
                        number = i.to_string();
                        &number
                    }
                    _ => continue,
                };
                let len = path.len();
                push_key(path, key);
                walk(u, v, path, depth + 1, visited, f);
                path.truncate(len);
            }
        }
        Value::List(id) | Value::Tuple(id) if depth < MAX_DEPTH => {
            if !enter(visited, *id) {
                return;
            }
            for (i, v) in u.items(*id).iter().enumerate() {
                let len = path.len();
                push_key(path, &i.to_string());
                walk(u, v, path, depth + 1, visited, f);
                path.truncate(len);
            }
        }
        Value::Set(_) | Value::Dict(_) | Value::List(_) | Value::Tuple(_) | Value::Mark => {}
        leaf => f(path, leaf),
    }
}

/// Appends `.key` to `path`, keeping it within [`MAX_NAME_BYTES`]: what
/// does not fit is cut at a character boundary and marked `…` once (a
/// path already cut takes nothing more).
fn push_key(path: &mut String, key: &str) {
    if is_cut(path) {
        return;
    }
    let dot = usize::from(!path.is_empty());
    if path.len() + dot + key.len() <= MAX_NAME_BYTES {
        if dot == 1 {
            path.push('.');
        }
        path.push_str(key);
        return;
    }
    if dot == 1 {
        path.push('.');
    }
    let room = MAX_NAME_BYTES.saturating_sub(path.len() + CUT.len_utf8());
    let mut end = room.min(key.len());
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    path.push_str(&key[..end]);
    path.push(CUT);
}

/// Whether `path` was cut by [`push_key`]: it ends in the mark within a
/// character's bytes of the bound (a path that long takes no more keys).
fn is_cut(path: &str) -> bool {
    path.ends_with(CUT) && path.len() + 4 > MAX_NAME_BYTES
}

#[cfg(test)]
mod tests {
    use super::{CUT, Listed, MAX_NAME_BYTES, is_cut, push_key};

    #[test]
    fn key_paths_are_cut_at_the_bound_on_a_character_and_told_apart() {
        let mut path = String::from("model");
        push_key(&mut path, "layers");
        assert_eq!(path, "model.layers");
        // A long key of three-byte characters: cut on a character.
        push_key(&mut path, &"日".repeat(1000));
        assert!(path.len() <= MAX_NAME_BYTES, "{}", path.len());
        assert!(is_cut(&path) && path.ends_with(CUT));
        let cut = path.len();
        push_key(&mut path, "weight");
        assert_eq!(path.len(), cut, "a cut path takes no more keys");
        let mut listed = Listed::default();
        let a = listed.name_of(&path);
        let b = listed.name_of(&path);
        assert_ne!(a, b, "two cut names stay apart");
        assert_eq!(listed.name_of("model.short"), "model.short");
        // Exactly at the bound: kept whole.
        let mut exact = String::new();
        push_key(&mut exact, &"x".repeat(MAX_NAME_BYTES));
        assert_eq!(exact.len(), MAX_NAME_BYTES);
        assert!(!is_cut(&exact));
    }

    #[test]
    fn the_budget_runs_out_and_says_how_much_was_left_out() {
        let mut listed = Listed {
            budget: Some(100),
            ..Listed::default()
        };
        assert!(listed.spend(60));
        assert!(!listed.spend(60));
        assert!(!listed.spend(1), "once out, out");
        listed.said_bounds(10);
        assert!(
            listed
                .skipped
                .iter()
                .any(|l| l.starts_with("2 values are not listed")),
            "{:?}",
            listed.skipped
        );
    }
}
