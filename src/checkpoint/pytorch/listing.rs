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
    let listed = list(&unpickled);
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
}

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

pub(super) fn list(u: &Unpickled) -> Listed {
    let mut out = Listed::default();
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
    out
}

pub(super) fn visit(
    path: &str,
    value: &Value,
    out: &mut Listed,
    positions: &mut BTreeMap<String, usize>,
) {
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
                let key = match k {
                    Value::Str(s) => s.to_string(),
                    Value::Int(i) => i.to_string(),
                    _ => continue,
                };
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
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
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&i.to_string());
                walk(u, v, path, depth + 1, visited, f);
                path.truncate(len);
            }
        }
        Value::Set(_) | Value::Dict(_) | Value::List(_) | Value::Tuple(_) | Value::Mark => {}
        leaf => f(path, leaf),
    }
}
