//! `weightscope inspect PATH [--json]`: the header summary.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::checkpoint::{Checkpoint, Layout, Summary, TensorRef};
use crate::units::json_plain_run;
use crate::units::{Shown, grouped, human_bytes, short_count, write_human_bytes};

#[derive(Serialize)]
struct JsonShard<'a> {
    file: &'a str,
    bytes: u64,
    data_bytes: u64,
    header_bytes: u64,
    tensors: usize,
}

#[derive(Serialize)]
struct JsonRecipe {
    mode: &'static str,
    bits: u64,
    group_size: u64,
    tensors: usize,
}

fn json_recipe(recipe: Vec<(crate::checkpoint::QuantParams, usize)>) -> Vec<JsonRecipe> {
    recipe
        .into_iter()
        .map(|(p, n)| JsonRecipe {
            mode: p.mode.name(),
            bits: p.bits,
            group_size: p.group_size,
            tensors: n,
        })
        .collect()
}

#[derive(Serialize)]
struct JsonQuantization {
    /// Every (mode, bits, group size) with its weights, most used first.
    recipe: Vec<JsonRecipe>,
    bits: u64,
    group_size: u64,
    mode: &'static str,
    modes: BTreeMap<&'static str, usize>,
    config_key: Option<&'static str>,
    quantized_tensors: usize,
    logical_params: u64,
    stored_bytes: u64,
    bits_per_weight: f64,
    inferred: bool,
}

#[derive(Serialize)]
struct JsonFp8 {
    tensors: usize,
    scaled_tensors: usize,
    block: Option<[u64; 2]>,
    scale_bytes: u64,
}

#[derive(Serialize)]
struct JsonLayer {
    layer: Option<u64>,
    params: u64,
    bytes: u64,
    bits_per_weight: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    quantized: Vec<JsonRecipe>,
}

#[derive(Serialize)]
struct JsonInspect<'a> {
    /// `safetensors` here; `gguf` from `super::gguf` (one schema for both:
    /// `docs/inspect.schema.json`).
    format: &'static str,
    path: String,
    /// The Hub commit the files were read at (a Hub repo only).
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<&'a str>,
    layout: &'static str,
    model_type: Option<&'a str>,
    shards: Vec<JsonShard<'a>>,
    tensor_count: usize,
    total_bytes: u64,
    file_bytes: u64,
    params_by_dtype: BTreeMap<&'static str, u64>,
    logical_params: u64,
    bits_per_weight: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    quantization: Option<JsonQuantization>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fp8: Option<JsonFp8>,
    layers: Vec<JsonLayer>,
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index_metadata: Option<&'a BTreeMap<String, String>>,
    /// `inspect --filter`: the query and how many tensors `tensors` lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<JsonFilter<'a>>,
    /// What only PyTorch files have: each file's pickle and format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pytorch: Option<JsonTorch<'a>>,
    /// Files of the folder not read because another format's were.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    not_read: &'a [String],
}

/// `pytorch` in the JSON.
#[derive(Serialize)]
struct JsonTorch<'a> {
    pickle: JsonPickle<'a>,
    files: Vec<JsonTorchFile<'a>>,
}

/// The pickles' verdict: the worst class of any global any file imports.
#[derive(Serialize)]
struct JsonPickle<'a> {
    verdict: crate::checkpoint::pytorch::Safety,
    /// Every global imported, each once: `module.name`.
    globals: Vec<&'a str>,
    /// The globals that are not innocuous, with their class, worst first.
    flagged: Vec<crate::checkpoint::pytorch::Imported>,
}

#[derive(Serialize)]
struct JsonTorchFile<'a> {
    file: &'a str,
    format: &'static str,
    verdict: crate::checkpoint::pytorch::Safety,
    pickle_bytes: u64,
    storages: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    skipped: &'a [String],
}

fn json_torch(checkpoint: &Checkpoint) -> Option<JsonTorch<'_>> {
    let (verdict, flagged) = checkpoint.torch_verdict()?;
    let mut globals: Vec<&str> = Vec::new();
    let mut files = Vec::new();
    for (k, shard) in checkpoint.shards().iter().enumerate() {
        let Some(torch) = checkpoint.torch_shard(crate::checkpoint::ShardId(k)) else {
            continue;
        };
        for g in &torch.globals {
            if !globals.contains(&g.global.as_str()) {
                globals.push(&g.global);
            }
        }
        files.push(JsonTorchFile {
            file: &shard.file,
            format: torch.format.name(),
            verdict: torch.verdict(),
            pickle_bytes: torch.pickle_bytes,
            storages: torch.storages.len(),
            version: torch.version.as_deref(),
            skipped: &torch.skipped,
        });
    }
    Some(JsonTorch {
        pickle: JsonPickle {
            verdict,
            globals,
            flagged,
        },
        files,
    })
}

fn layout_name(layout: &Layout) -> &'static str {
    match layout {
        Layout::Indexed { .. } => "indexed",
        Layout::Folder => "folder",
        Layout::SingleFile => "file",
    }
}

/// The tensors `inspect --filter` lists: its text and, by position,
/// whether each is kept.
pub struct Kept {
    /// The filter as typed.
    pub text: String,
    /// Whether the tensor at each position is listed.
    pub keep: Vec<bool>,
}

/// `filter` in the JSON: the query and how many tensors it kept.
#[derive(Serialize)]
struct JsonFilter<'a> {
    query: &'a str,
    matched: usize,
}

/// Whether each tensor passes `query`: its name, stored dtype and shape,
/// bytes, and, for a packed or FP8 weight, its logical shape and mode.
fn kept_by(
    checkpoint: &Checkpoint,
    summary: &Summary,
    query: &crate::checkpoint::query::TensorQuery,
) -> Vec<bool> {
    let tensors = checkpoint.tensors();
    let mut encoded: Vec<Option<(String, &[u64])>> = vec![None; tensors.len()];
    if let Some(q) = &summary.quantization {
        for t in &q.tensors {
            if let Some(slot) = encoded.get_mut(t.weight) {
                *slot = Some((t.params.mode.name().to_owned(), t.logical_shape.as_slice()));
            }
        }
    }
    if let Some(f) = &summary.fp8 {
        for t in &f.tensors {
            if let Some(slot) = encoded.get_mut(t.weight) {
                *slot = Some(("fp8".to_owned(), &[][..]));
            }
        }
    }
    tensors
        .iter()
        .map(|t| {
            let e = encoded.get(t.position()).and_then(Option::as_ref);
            query.matches(&crate::checkpoint::query::TensorFacts {
                names: [Some(t.name()), None],
                dtype: t.dtype().name(),
                shapes: [
                    Some(t.shape()),
                    e.map(|(_, shape)| *shape).filter(|s| !s.is_empty()),
                ],
                bytes: t.bytes(),
                mode: e.map(|(mode, _)| mode.as_str()),
            })
        })
        .collect()
}

/// Writes the JSON summary of `checkpoint` to `out`.
///
/// # Errors
/// When writing fails.
pub fn write_json(
    checkpoint: &Checkpoint,
    summary: &Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    write_json_kept(checkpoint, summary, None, out)
}

/// [`write_json`] listing only the tensors `kept` keeps (the figures are
/// the whole checkpoint's), with `filter` saying so.
///
/// # Errors
/// When writing fails.
pub fn write_json_kept(
    checkpoint: &Checkpoint,
    summary: &Summary,
    kept: Option<&Kept>,
    out: &mut impl Write,
) -> io::Result<()> {
    let shards = checkpoint.shards();
    let quantization = summary.quantization.as_ref().map(|q| JsonQuantization {
        recipe: json_recipe(q.recipe()),
        bits: q.default.bits,
        group_size: q.default.group_size,
        mode: q.default.mode.name(),
        modes: q.modes.iter().map(|(m, n)| (m.name(), *n)).collect(),
        config_key: checkpoint
            .config()
            .and_then(|c| c.quantization.as_ref())
            .map(|c| c.source),
        quantized_tensors: q.tensors.len(),
        logical_params: q.logical_elements,
        stored_bytes: q.stored_bytes,
        bits_per_weight: q.bits_per_weight,
        inferred: q.tensors.iter().any(|t| t.inferred),
    });
    let doc = JsonInspect {
        format: if checkpoint.is_torch() {
            "pytorch"
        } else {
            "safetensors"
        },
        path: crate::units::location_data(&checkpoint.root().to_string_lossy()),
        commit: checkpoint
            .remote()
            .and_then(crate::checkpoint::ByteSource::commit),
        layout: layout_name(checkpoint.layout()),
        model_type: checkpoint.config().and_then(|c| c.model_type.as_deref()),
        shards: shards
            .iter()
            .map(|s| JsonShard {
                file: &s.file,
                bytes: s.file_bytes,
                data_bytes: s.data_bytes,
                header_bytes: s.header_bytes,
                tensors: s.tensors.len(),
            })
            .collect(),
        tensor_count: summary.tensor_count,
        total_bytes: summary.total_bytes,
        file_bytes: summary.file_bytes,
        params_by_dtype: summary
            .params_by_dtype
            .iter()
            .map(|(d, n)| (d.name(), *n))
            .collect(),
        logical_params: summary.logical_params,
        bits_per_weight: summary.bits_per_weight,
        quantization,
        fp8: summary.fp8.as_ref().map(|f| JsonFp8 {
            tensors: f.tensors.len(),
            scaled_tensors: f.tensors.iter().filter(|t| t.scale.is_some()).count(),
            block: f.block,
            scale_bytes: f.scale_bytes,
        }),
        layers: summary
            .layers
            .iter()
            .map(|l| JsonLayer {
                layer: l.layer,
                params: l.params,
                bytes: l.bytes,
                bits_per_weight: l.bits_per_weight(),
                quantized: summary
                    .quantization
                    .as_ref()
                    .map(|q| json_recipe(q.recipe_of_layer(l.layer)))
                    .unwrap_or_default(),
            })
            .collect(),
        metadata: checkpoint.metadata(),
        index_metadata: match checkpoint.layout() {
            Layout::Indexed { index, .. } => Some(&index.metadata),
            _ => None,
        },
        filter: kept.map(|k| JsonFilter {
            query: &k.text,
            matched: k.keep.iter().filter(|&&b| b).count(),
        }),
        pytorch: json_torch(checkpoint),
        not_read: checkpoint.not_read(),
    };
    // The summary object, then `"tensors": [...]` spliced in before its
    // closing brace: the 90k-entry list is serialized on every core.
    let mut head = serde_json::to_vec(&doc)?;
    head.pop(); // the closing `}`
    out.write_all(&head)?;
    out.write_all(b",\"tensors\":[")?;
    write_tensor_list(
        checkpoint,
        summary,
        &roles(checkpoint, summary),
        kept.map(|k| k.keep.as_slice()),
        out,
    )?;
    out.write_all(b"]}\n")
}

/// Writes the `tensors` array's elements to `out`, in order. The list (14 MB
/// for 90k tensors) is serialized piece by piece on every core and written as
/// the pieces come in order (see [`super::pieces::write_in_pieces`]).
///
/// A speed trick that earns its keep: the entries are written by hand
/// ([`push_tensor`], [`push_role`]), each run of fields that repeats
/// (dtype, shape, bytes; an FP8 weight's packing) copied from the last
/// time it was rendered ([`Recent`], the one memo). Through borrowed
/// `Serialize` structs on every core instead (as GGUF's list is written),
/// the whole `inspect --json` process took 1.28-1.36x as long on the
/// bench's 90k-tensor layout (27.4 against 21.1 ms, alternating runs,
/// 2026-12-03). The unit tests below pin every field to what `serde_json`
/// writes.
fn write_tensor_list(
    checkpoint: &Checkpoint,
    summary: &Summary,
    roles: &Roles,
    keep: Option<&[bool]>,
    out: &mut impl Write,
) -> io::Result<()> {
    let tensors = checkpoint.tensors();
    // Each shard's file name as a JSON string, once (163 names, 90k uses).
    let shard_names: Vec<Vec<u8>> = checkpoint
        .shards()
        .iter()
        .map(|s| {
            let mut quoted = Vec::with_capacity(s.file.len() + 2);
            push_json_str(&mut quoted, &s.file);
            quoted
        })
        .collect();
    let serialize = |piece: std::ops::Range<usize>, buf: &mut Vec<u8>| {
        let first = piece.start;
        let mut recent = RecentFields::default();
        let mut listed = 0;
        for (i, t) in tensors.iter_range(piece).enumerate() {
            if keep.is_some_and(|k| !k.get(first + i).copied().unwrap_or(false)) {
                continue;
            }
            if listed > 0 {
                buf.push(b',');
            }
            listed += 1;
            push_tensor(buf, t, &shard_names[t.shard().index()], &mut recent);
            if let Some(role) = roles.get(first + i) {
                push_role(buf, role, t, checkpoint, summary, &mut recent);
            }
            if let Some(at) = checkpoint.torch_tensor_at(first + i) {
                push_torch(buf, at, checkpoint);
            }
            buf.push(b'}');
        }
    };
    super::pieces::write_in_pieces(tensors.len(), b",", &serialize, out)
}

/// What a tensor's list entry says beyond its header fields.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// `,"part_of":"<owner>"`: scales, biases or a block scale.
    PartOf(usize),
    /// `,"quantized":{..}` of the MLX-quantized weight at this position of
    /// the summary's list.
    Quantized(usize),
    /// `,"quantized":{..}` of the FP8 weight at this position of the
    /// summary's list.
    Fp8(usize),
}

/// Each tensor's [`Role`] by position, a word each (a `Role` would take
/// two: 1.4 MB for 90k tensors instead of 0.7).
#[derive(Debug)]
struct Roles(Vec<u64>);

impl Roles {
    /// The top two bits of a word: no role, or which one (the rest holds
    /// its position).
    const SHIFT: u32 = 62;

    fn get(&self, i: usize) -> Option<Role> {
        let word = *self.0.get(i)?;
        let at = usize::try_from(word & ((1 << Self::SHIFT) - 1)).ok()?;
        match word >> Self::SHIFT {
            1 => Some(Role::PartOf(at)),
            2 => Some(Role::Quantized(at)),
            3 => Some(Role::Fp8(at)),
            _ => None,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Each tensor's role (by position), built once (one small array, not a
/// JSON value per tensor: 45k FP8 weights made that the slowest part).
fn roles(checkpoint: &Checkpoint, summary: &Summary) -> Roles {
    let mut roles = vec![0u64; checkpoint.tensors().len()];
    // Positions are below 2^62 on any machine this runs on.
    let mut set = |i: usize, role: Role| {
        let (tag, at) = match role {
            Role::PartOf(at) => (1, at),
            Role::Quantized(at) => (2, at),
            Role::Fp8(at) => (3, at),
        };
        if let (Some(slot), Ok(at)) = (roles.get_mut(i), u64::try_from(at)) {
            *slot = (tag << Roles::SHIFT) | at;
        }
    };
    if let Some(q) = &summary.quantization {
        for (k, t) in q.tensors.iter().enumerate() {
            for aux in [Some(t.scales), t.biases].into_iter().flatten() {
                set(aux, Role::PartOf(t.weight));
            }
            set(t.weight, Role::Quantized(k));
        }
    }
    if let Some(f) = &summary.fp8 {
        for (k, t) in f.tensors.iter().enumerate() {
            if let Some(scale) = t.scale {
                set(scale, Role::PartOf(t.weight));
            }
            set(t.weight, Role::Fp8(k));
        }
    }
    Roles(roles)
}

/// Text written lately for a few keys, copied when a key comes again: a
/// checkpoint repeats a handful of dtypes and shapes over thousands of
/// entries (every expert's projections), whose numbers need not be
/// formatted each time.
struct Recent<K> {
    slots: Vec<(K, Vec<u8>)>,
    /// The slot the next new key replaces, once all are taken.
    next: usize,
}

impl<K> Default for Recent<K> {
    fn default() -> Self {
        Self {
            slots: Vec::with_capacity(RECENT_KEPT),
            next: 0,
        }
    }
}

/// Keys a [`Recent`] keeps: enough for a block of experts and a layer's
/// attention.
const RECENT_KEPT: usize = 8;

impl<K: PartialEq> Recent<K> {
    /// Appends the text for `key`: what `render` wrote for it lately, else
    /// what it writes now (and keeps).
    fn write(&mut self, buf: &mut Vec<u8>, key: K, render: impl FnOnce(&mut Vec<u8>)) {
        if let Some((_, text)) = self.slots.iter().find(|(k, _)| *k == key) {
            buf.extend_from_slice(text);
            return;
        }
        let start = buf.len();
        render(buf);
        let text = buf.get(start..).unwrap_or_default().to_vec();
        if self.slots.len() < RECENT_KEPT {
            self.slots.push((key, text));
        } else if let Some(slot) = self.slots.get_mut(self.next) {
            *slot = (key, text);
            self.next = (self.next + 1) % RECENT_KEPT;
        }
    }
}

/// What a tensor's `dtype`, `shape` and `bytes` fields are written from.
type FieldsKey<'a> = (crate::checkpoint::Dtype, u64, &'a [u64]);

/// What an FP8 weight's `quantized` object is written from: its block,
/// format name and shape.
type Fp8Key<'a> = (Option<[u64; 2]>, &'static str, &'a [u64]);

/// The recent texts of one writer: a tensor's dtype, shape and bytes, and
/// an FP8 weight's `quantized` object.
#[derive(Default)]
struct RecentFields<'a> {
    fields: Recent<FieldsKey<'a>>,
    fp8: Recent<Fp8Key<'a>>,
}

/// Appends the fields `role` adds to an entry, byte for byte as
/// `serde_json` writes them (object keys in sorted order, as its `json!`
/// maps keep them).
fn push_role<'a>(
    buf: &mut Vec<u8>,
    role: Role,
    tensor: TensorRef<'a>,
    checkpoint: &'a Checkpoint,
    summary: &Summary,
    recent: &mut RecentFields<'a>,
) {
    let tensors = checkpoint.tensors();
    // Owners and weights are mostly in the tensor's own shard: no search.
    let at = |position: usize| {
        tensor
            .sibling(position)
            .unwrap_or_else(|| tensors.at(position))
    };
    match role {
        Role::PartOf(owner) => {
            buf.extend_from_slice(b",\"part_of\":");
            push_name(buf, at(owner));
        }
        Role::Quantized(k) => {
            let Some(t) = summary.quantization.as_ref().and_then(|q| q.tensors.get(k)) else {
                return;
            };
            let mut n = itoa::Buffer::new();
            buf.extend_from_slice(b",\"quantized\":{\"bits\":");
            buf.extend_from_slice(n.format(t.params.bits).as_bytes());
            buf.extend_from_slice(b",\"bits_per_weight\":");
            // Writing into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *buf, &t.bits_per_weight(checkpoint));
            buf.extend_from_slice(b",\"group_size\":");
            buf.extend_from_slice(n.format(t.params.group_size).as_bytes());
            buf.extend_from_slice(if t.inferred {
                b",\"inferred\":true,\"mode\":"
            } else {
                b",\"inferred\":false,\"mode\":"
            });
            push_json_str(buf, t.params.mode.name());
            buf.extend_from_slice(b",\"shape\":");
            push_naturals(buf, &t.logical_shape);
            buf.push(b'}');
        }
        Role::Fp8(k) => {
            let Some(t) = summary.fp8.as_ref().and_then(|f| f.tensors.get(k)) else {
                return;
            };
            let shape = at(t.weight).shape();
            let key = (t.block, t.format.name(), shape);
            recent.fp8.write(buf, key, |buf| {
                buf.extend_from_slice(b",\"quantized\":{\"block\":");
                match t.block {
                    Some(block) => push_naturals(buf, &block),
                    None => buf.extend_from_slice(b"null"),
                }
                // Format names are plain ASCII identifiers: nothing to escape.
                buf.extend_from_slice(b",\"format\":\"");
                buf.extend_from_slice(t.format.name().as_bytes());
                buf.push(b'"');
                buf.extend_from_slice(b",\"mode\":\"fp8\",\"shape\":");
                push_naturals(buf, shape);
                buf.push(b'}');
            });
        }
    }
}

/// One element of the `tensors` list without its closing brace:
/// `{"name":..,"dtype":..,"shape":[..],"bytes":..,"shard":..`, written by
/// hand (a third of serde's time on 90k entries), byte for byte as
/// `serde_json` writes it.
fn push_tensor<'a>(
    buf: &mut Vec<u8>,
    tensor: TensorRef<'a>,
    shard_name: &[u8],
    recent: &mut RecentFields<'a>,
) {
    buf.extend_from_slice(b"{\"name\":");
    push_name(buf, tensor);
    let key = (tensor.dtype(), tensor.bytes(), tensor.shape());
    recent.fields.write(buf, key, |buf| {
        buf.extend_from_slice(b",\"dtype\":\"");
        // Dtype names are plain ASCII identifiers: nothing to escape.
        buf.extend_from_slice(tensor.dtype().name().as_bytes());
        buf.extend_from_slice(b"\",\"shape\":");
        push_naturals(buf, tensor.shape());
        buf.extend_from_slice(b",\"bytes\":");
        buf.extend_from_slice(itoa::Buffer::new().format(tensor.bytes()).as_bytes());
    });
    buf.extend_from_slice(b",\"shard\":");
    buf.extend_from_slice(shard_name);
}

/// The lines only PyTorch files have: the format, the pickle's verdict
/// with every global that is not innocuous, the tensors on another's
/// storage; and files of the folder that were not read.
fn write_torch(checkpoint: &Checkpoint, out: &mut impl Write) -> io::Result<()> {
    for file in checkpoint.not_read() {
        writeln!(
            out,
            "not read     {} (the safetensors files are read, as transformers reads them)",
            Shown::new(file)
        )?;
    }
    let Some((verdict, flagged)) = checkpoint.torch_verdict() else {
        return Ok(());
    };
    let formats: std::collections::BTreeSet<&str> = (0..checkpoint.shards().len())
        .filter_map(|k| checkpoint.torch_shard(crate::checkpoint::ShardId(k)))
        .map(|t| t.format.name())
        .collect();
    let formats: Vec<&str> = formats.into_iter().collect();
    writeln!(
        out,
        "format       pytorch ({}), read without running its pickle",
        formats.join(", ")
    )?;
    if flagged.is_empty() {
        writeln!(
            out,
            "pickle       {}: every global it imports is one the reader understands",
            verdict.name()
        )?;
    }
    for g in &flagged {
        writeln!(
            out,
            "pickle       {}: imports `{}` (never called here; torch.load would call it)",
            g.safety.name(),
            Shown::new(&g.global)
        )?;
    }
    let tensors = checkpoint.tensors();
    let mut tied = 0;
    for t in tensors {
        let Some(at) = checkpoint.torch_tensor_at(t.position()) else {
            continue;
        };
        let Some(other) = at.tied_to.and_then(|i| tensors.get(i)) else {
            continue;
        };
        tied += 1;
        if tied <= 20 {
            let how = if at.same_view {
                "tied to"
            } else {
                "a view of the storage of"
            };
            writeln!(
                out,
                "shared       {} is {how} {} (counted once)",
                Shown::new(t.name()),
                Shown::new(other.name())
            )?;
        }
    }
    if tied > 20 {
        writeln!(out, "shared       and {} more", tied - 20)?;
    }
    Ok(())
}

/// A torch tensor's `,"tied_to":..,"storage":{..}` (its storage key,
/// element offset and strides).
fn push_torch(
    buf: &mut Vec<u8>,
    at: &crate::checkpoint::torch_checkpoint::TorchAt,
    checkpoint: &Checkpoint,
) {
    if let Some(other) = at.tied_to.and_then(|i| checkpoint.tensors().get(i)) {
        buf.extend_from_slice(b",\"tied_to\":");
        push_name(buf, other);
    }
    buf.extend_from_slice(b",\"storage\":{\"key\":");
    push_json_str(buf, &at.storage_key);
    buf.extend_from_slice(b",\"offset\":");
    buf.extend_from_slice(itoa::Buffer::new().format(at.offset).as_bytes());
    buf.extend_from_slice(b",\"stride\":");
    push_naturals(buf, &at.stride);
    buf.push(b'}');
}

/// `values` as a JSON array, as `serde_json` writes one.
fn push_naturals(buf: &mut Vec<u8>, values: &[u64]) {
    let mut digits = itoa::Buffer::new();
    buf.push(b'[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(digits.format(*v).as_bytes());
    }
    buf.push(b']');
}

/// `tensor`'s name as a JSON string: copied without a look when it is known
/// to need no escape, else as [`push_json_str`] writes it.
fn push_name(buf: &mut Vec<u8>, tensor: TensorRef<'_>) {
    if tensor.name_is_plain() {
        buf.push(b'"');
        buf.extend_from_slice(tensor.name().as_bytes());
        buf.push(b'"');
    } else {
        push_json_str(buf, tensor.name());
    }
}

/// `text` as a JSON string: copied as is when it needs no escape (names
/// nearly always), else through `serde_json` for its exact escapes.
fn push_json_str(buf: &mut Vec<u8>, text: &str) {
    if json_plain_run(text.as_bytes()) == text.len() {
        buf.push(b'"');
        buf.extend_from_slice(text.as_bytes());
        buf.push(b'"');
    } else {
        // Writing into a Vec cannot fail, and a string always serializes.
        let _ = serde_json::to_writer(buf, text);
    }
}

/// Writes the human summary and tables of `checkpoint` to `out`.
///
/// # Errors
/// When writing fails.
pub fn write_text(
    checkpoint: &Checkpoint,
    summary: &Summary,
    out: &mut impl Write,
) -> io::Result<()> {
    write_text_kept(checkpoint, summary, None, out)
}

/// [`write_text`] with only the tensors `kept` keeps in the table.
///
/// # Errors
/// When writing fails.
pub fn write_text_kept(
    checkpoint: &Checkpoint,
    summary: &Summary,
    kept: Option<&Kept>,
    out: &mut impl Write,
) -> io::Result<()> {
    let shards = checkpoint.shards();
    writeln!(out, "checkpoint   {}", Shown::path(checkpoint.root()))?;
    if let Some(commit) = checkpoint
        .remote()
        .and_then(crate::checkpoint::ByteSource::commit)
    {
        writeln!(out, "commit       {}", Shown::new(commit))?;
    }
    writeln!(
        out,
        "layout       {} ({} shard{})",
        layout_name(checkpoint.layout()),
        shards.len(),
        if shards.len() == 1 { "" } else { "s" }
    )?;
    if let Some(model_type) = checkpoint.config().and_then(|c| c.model_type.as_deref()) {
        writeln!(out, "model type   {model_type}")?;
    }
    writeln!(
        out,
        "tensors      {} holding {} ({} on disk)",
        grouped(summary.tensor_count as u64),
        human_bytes(summary.total_bytes),
        human_bytes(summary.file_bytes)
    )?;
    writeln!(
        out,
        "parameters   {} ({})",
        short_count(summary.logical_params),
        grouped(summary.logical_params)
    )?;
    let by_dtype: Vec<String> = summary
        .params_by_dtype
        .iter()
        .map(|(d, n)| format!("{d} {}", grouped(*n)))
        .collect();
    writeln!(out, "by dtype     {}", by_dtype.join(", "))?;
    writeln!(
        out,
        "bits/weight  {:.3} (every stored byte over the parameters, as mlx-lm counts)",
        summary.bits_per_weight
    )?;
    write_encodings(summary, out)?;
    write_torch(checkpoint, out)?;
    for (key, value) in checkpoint.metadata() {
        writeln!(out, "metadata     {key} = {value}")?;
    }

    writeln!(out)?;
    let file_width = shards
        .iter()
        .map(|s| s.file.len())
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        out,
        "{:<file_width$}  {:>12}  {:>8}",
        "SHARD", "BYTES", "TENSORS"
    )?;
    for s in shards {
        writeln!(
            out,
            "{:<file_width$}  {:>12}  {:>8}",
            Shown::new(&s.file),
            human_bytes(s.file_bytes),
            s.tensors.len()
        )?;
    }

    write_layers(summary, out)?;
    writeln!(out)?;
    if let Some(k) = kept {
        writeln!(
            out,
            "filter       {}: {} of {} tensors",
            Shown::new(&k.text),
            k.keep.iter().filter(|&&b| b).count(),
            k.keep.len()
        )?;
    }
    write_tensor_rows(checkpoint, kept.map(|k| k.keep.as_slice()), out)
}

/// The per-layer table: parameters, bytes, bits per weight, and how the
/// layer's weights are quantized (every numbered layer, then the rest).
fn write_layers(summary: &Summary, out: &mut impl Write) -> io::Result<()> {
    if summary.layers.len() < 2 {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<8}  {:>10}  {:>12}  {:>6}  QUANTIZED",
        "LAYER", "PARAMS", "BYTES", "BITS/W"
    )?;
    for l in &summary.layers {
        let quantized = summary.quantization.as_ref().map_or(String::new(), |q| {
            q.recipe_of_layer(l.layer)
                .iter()
                .map(|(p, n)| format!("{} {}-bit g{} x{n}", p.mode, p.bits, p.group_size))
                .collect::<Vec<_>>()
                .join(", ")
        });
        writeln!(
            out,
            "{:<8}  {:>10}  {:>12}  {:>6.2}  {}",
            l.layer
                .map_or_else(|| "other".to_owned(), |n| n.to_string()),
            short_count(l.params),
            human_bytes(l.bytes),
            l.bits_per_weight(),
            if quantized.is_empty() {
                "-"
            } else {
                &quantized
            }
        )?;
    }
    Ok(())
}

/// The table of every tensor: name, dtype, shape, bytes, shard.
fn write_tensor_rows(
    checkpoint: &Checkpoint,
    keep: Option<&[bool]>,
    out: &mut impl Write,
) -> io::Result<()> {
    let shards = checkpoint.shards();
    let tensors = checkpoint.tensors();
    let name_width = name_column_width(checkpoint);
    let shape_width = tensors
        .iter()
        .map(|t| shape_text_len(t.shape()))
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        out,
        "{:<name_width$}  {:<11}  {:<shape_width$}  {:>12}  SHARD",
        "NAME", "DTYPE", "SHAPE", "BYTES"
    )?;
    let shard_names: Vec<Shown<'_>> = shards.iter().map(|s| Shown::new(&s.file)).collect();
    // The 90k rows, as the JSON list: in pieces on every core.
    // Padded by hand, byte for byte as `{:<w$}` and `{:>w$}` pad (by
    // characters): the formatter took most of the time of 90k rows.
    let rows = |piece: std::ops::Range<usize>, buf: &mut Vec<u8>| {
        let mut shape = String::new();
        let mut bytes = String::new();
        let mut digits = itoa::Buffer::new();
        for t in tensors.iter_range(piece) {
            if keep.is_some_and(|k| !k.get(t.position()).copied().unwrap_or(false)) {
                continue;
            }
            let name = Shown::new(t.name());
            buf.extend_from_slice(name.as_bytes());
            pad(buf, name_width, name.chars().count());
            buf.extend_from_slice(b"  ");
            let dtype = t.dtype().name();
            buf.extend_from_slice(dtype.as_bytes());
            pad(buf, 11, dtype.len());
            buf.extend_from_slice(b"  ");
            shape.clear();
            shape.push('[');
            for (i, d) in t.shape().iter().enumerate() {
                if i > 0 {
                    shape.push_str(", ");
                }
                shape.push_str(digits.format(*d));
            }
            shape.push(']');
            buf.extend_from_slice(shape.as_bytes());
            pad(buf, shape_width, shape.len());
            buf.extend_from_slice(b"  ");
            bytes.clear();
            write_human_bytes(&mut bytes, t.bytes());
            pad(buf, 12, bytes.len());
            buf.extend_from_slice(bytes.as_bytes());
            buf.extend_from_slice(b"  ");
            buf.extend_from_slice(shard_names[t.shard().index()].as_bytes());
            buf.push(b'\n');
        }
    };
    super::pieces::write_in_pieces(tensors.len(), b"", &rows, out)
}

/// The NAME column's width: the longest printable name, 4 to 72 characters.
fn name_column_width(checkpoint: &Checkpoint) -> usize {
    checkpoint
        .tensors()
        .iter()
        .map(|t| Shown::new(t.name()).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, 72)
}

/// Spaces that bring text of `len` characters to `width`.
fn pad(buf: &mut Vec<u8>, width: usize, len: usize) {
    buf.resize(buf.len() + width.saturating_sub(len), b' ');
}

/// The length of `shape` written as `{:?}` writes it (`[7168, 2048]`).
fn shape_text_len(shape: &[u64]) -> usize {
    let digits: usize = shape
        .iter()
        .map(|&d| d.checked_ilog10().map_or(1, |l| l as usize + 1))
        .sum();
    2 + digits + 2 * shape.len().saturating_sub(1)
}

/// The quantization and FP8 lines of the text summary.
fn write_encodings(summary: &Summary, out: &mut impl Write) -> io::Result<()> {
    if let Some(q) = &summary.quantization {
        let default = if q.recipe().len() > 1 || q.default_unused() {
            format!(
                " (config.json's default, {} {}-bit g{}, {})",
                q.default.mode,
                q.default.bits,
                q.default.group_size,
                if q.default_unused() {
                    "is used by none"
                } else {
                    "is one of them"
                }
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "quantized    {} tensors: {}{default}{}: {:.2} bits per weight with {}",
            q.tensors.len(),
            q.recipe_text(),
            if q.tensors.iter().any(|t| t.inferred) {
                " (some inferred from shapes)"
            } else {
                ""
            },
            q.bits_per_weight,
            if q.modes.keys().all(|m| m.has_biases()) {
                "scales and biases"
            } else if q.modes.keys().any(|m| m.has_biases()) {
                "scales (and biases in affine layers)"
            } else {
                "scales"
            }
        )?;
    }
    if let Some(f) = &summary.fp8 {
        let scaled = f.tensors.iter().filter(|t| t.scale.is_some()).count();
        writeln!(
            out,
            "fp8          {} tensors, {} with block scales{}; scales {} (overhead, not parameters)",
            f.tensors.len(),
            scaled,
            f.block
                .map_or_else(String::new, |[r, c]| format!(" of {r}x{c}")),
            human_bytes(f.scale_bytes)
        )?;
    }
    Ok(())
}

/// What `weightscope inspect` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct InspectArgs {
    /// A folder, one `.safetensors` or `.gguf` file, a Hub repo (`hf://ORG/REPO[@REV]`) or an `https://` address of one file.
    pub path: std::path::PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// List only the tensors this filter keeps, as the window's table
    /// filter reads it: name words, `shape:2048x7168` (`*` any size),
    /// `dtype:bf16`, `mode:nvfp4`, `size>100M` (docs/app.md).
    #[arg(long, value_name = "QUERY")]
    pub filter: Option<String>,
}

/// `weightscope inspect`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &InspectArgs) -> u8 {
    let (path, json) = (args.path.as_path(), args.json);
    let gguf_filter = || {
        super::stderr_line(format_args!(
            "--filter: {}: a GGUF file's tensors are listed whole (the filter reads safetensors checkpoints for now)",
            Shown::path(path)
        ));
        super::BAD_INPUT
    };
    if path.is_file() && crate::checkpoint::gguf::is_gguf(path) {
        if args.filter.is_some() {
            return gguf_filter();
        }
        return super::gguf::main(path, json);
    }
    let checkpoint = match super::open_checkpoint(path) {
        Ok(checkpoint) => checkpoint,
        Err(err) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
    };
    let fatal = checkpoint.fatal_problems();
    if !fatal.is_empty() {
        for problem in fatal {
            super::stderr_line(format_args!("{problem}"));
        }
        return super::BAD_INPUT;
    }
    for problem in checkpoint.problems() {
        super::stderr_line(format_args!("warning: {problem}"));
    }
    // A GGUF file on the Hub or at a URL: the same report as a local one.
    if let Some(header) = checkpoint.gguf_header() {
        if args.filter.is_some() {
            return gguf_filter();
        }
        let place = super::gguf::Place {
            path,
            file_bytes: checkpoint.shards().first().map_or(0, |s| s.file_bytes),
            commit: checkpoint
                .remote()
                .and_then(crate::checkpoint::ByteSource::commit),
        };
        return super::gguf::report(&place, header, json);
    }
    let summary = checkpoint.summary();
    let kept = match &args.filter {
        None => None,
        Some(text) => match crate::checkpoint::query::TensorQuery::parse(text) {
            Ok(query) => Some(Kept {
                text: text.clone(),
                keep: kept_by(&checkpoint, &summary, &query),
            }),
            Err(err) => {
                super::stderr_line(format_args!("--filter: {err}"));
                return super::BAD_INPUT;
            }
        },
    };
    let mut out = super::big_output();
    let written = if json {
        write_json_kept(&checkpoint, &summary, kept.as_ref(), &mut out)
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        write_text_kept(&checkpoint, &summary, kept.as_ref(), &mut shown)
            .and_then(|()| shown.finish().map(drop))
    };
    let flushed = written.and_then(|()| std::io::Write::flush(&mut out));
    super::output_status(flushed).map_or_else(|code| code, |()| 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Dtype;

    #[test]
    fn tensor_entries_are_written_as_serde_json_writes_them() {
        #[derive(Serialize)]
        struct Entry<'a> {
            name: &'a str,
            dtype: &'static str,
            shape: &'a [u64],
            bytes: u64,
            shard: &'a str,
        }
        for (name, shard, shape) in [
            (
                "model.layers.0.mlp.weight",
                "model-00001.safetensors",
                vec![7168, 2048],
            ),
            (
                "q\"uote\\back\nline\t\u{1}\u{7f}",
                "a\"b.safetensors",
                vec![],
            ),
            (
                "ünïcode 名前 \u{1F600}",
                "s\u{1f}.safetensors",
                vec![u64::MAX, 0, 1],
            ),
        ] {
            let mut columns = crate::checkpoint::ShardTensors::default();
            let end = 3 + 2 * shape.iter().product::<u64>().min(1 << 40);
            assert!(columns.push(name, Dtype::BF16, &shape, (3, end)));
            let tensor = columns.get(0).expect("pushed");
            let mut shard_name = Vec::new();
            push_json_str(&mut shard_name, shard);
            let mut ours = Vec::new();
            push_tensor(&mut ours, tensor, &shard_name, &mut RecentFields::default());
            ours.push(b'}');
            let theirs = serde_json::to_vec(&Entry {
                name,
                dtype: "BF16",
                shape: &shape,
                bytes: tensor.bytes(),
                shard,
            })
            .expect("serialize");
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs)
            );
        }
    }

    #[test]
    fn names_read_by_the_scanner_are_copied_and_others_escaped() {
        use safetensors::tensor::{Dtype as St, TensorView};
        let dir = tempfile::tempdir().expect("tempdir");
        let zeros = [0u8; 2];
        let plain = ["model.layers.0.w", "ünïcode 名前 \u{1F600}"];
        let escaped = ["q\"uote\\back", "tab\there"];
        for (file, names) in [("a.safetensors", plain), ("b.safetensors", escaped)] {
            let tensors: Vec<_> = names
                .iter()
                .map(|&n| {
                    (
                        n,
                        TensorView::new(St::U8, vec![1], &zeros[..1]).expect("view"),
                    )
                })
                .collect();
            safetensors::serialize_to_file(tensors, None, &dir.path().join(file)).expect("write");
        }
        let checkpoint = Checkpoint::open(dir.path()).expect("open");
        let vouched: Vec<(&str, bool)> = checkpoint
            .tensors()
            .iter()
            .map(|t| (t.name(), t.name_is_plain()))
            .collect();
        assert!(
            vouched.iter().all(|&(n, v)| v == plain.contains(&n)),
            "{vouched:?}"
        );
        let mut out = Vec::new();
        write_json(&checkpoint, &checkpoint.summary(), &mut out).expect("write");
        let doc: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        let mut names: Vec<&str> = doc["tensors"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        names.sort_unstable();
        let mut expected: Vec<&str> = plain.iter().chain(&escaped).copied().collect();
        expected.sort_unstable();
        assert_eq!(names, expected);
    }

    #[test]
    fn text_rows_are_padded_as_the_formatter_pads_them() {
        use safetensors::tensor::{Dtype as St, TensorView};
        let dir = tempfile::tempdir().expect("tempdir");
        let zeros = vec![0u8; 1 << 12];
        let view = |dtype, shape: Vec<usize>, bytes: usize| {
            TensorView::new(dtype, shape, &zeros[..bytes]).expect("view")
        };
        let long = format!("model.{}.weight", "x".repeat(90));
        let tensors = vec![
            ("ünï 名前.weight", view(St::BF16, vec![32, 64], 4096)),
            (long.as_str(), view(St::F8_E4M3, vec![1], 1)),
            ("s", view(St::F32, vec![], 4)),
            ("bias\u{200e}", view(St::U8, vec![3, 1, 1000], 3000)),
        ];
        safetensors::serialize_to_file(tensors, None, &dir.path().join("model.safetensors"))
            .expect("write");
        let checkpoint = Checkpoint::open(dir.path()).expect("open");
        let summary = checkpoint.summary();
        let mut ours = Vec::new();
        write_text(&checkpoint, &summary, &mut ours).expect("write");
        let ours = String::from_utf8(ours).expect("text");
        let rows: Vec<&str> = ours
            .lines()
            .skip_while(|l| !l.starts_with("NAME"))
            .skip(1)
            .collect();
        let tensors = checkpoint.tensors();
        let name_width = name_column_width(&checkpoint);
        assert_eq!(
            name_width, 72,
            "the column stops at 72; a longer name runs over"
        );
        let shape_width = tensors
            .iter()
            .map(|t| format!("{:?}", t.shape()).len())
            .max()
            .unwrap_or(0)
            .max(5);
        assert_eq!(rows.len(), 4);
        for (t, row) in tensors.iter().zip(rows) {
            let want = format!(
                "{:<name_width$}  {:<11}  {:<shape_width$}  {:>12}  {}",
                Shown::new(t.name()),
                t.dtype().name(),
                format!("{:?}", t.shape()),
                human_bytes(t.bytes()),
                "model.safetensors"
            );
            assert_eq!(row, want);
        }
    }

    #[test]
    fn quantized_and_part_of_fields_are_written_as_serde_json_writes_them() {
        use safetensors::tensor::{Dtype as St, TensorView};
        let dir = tempfile::tempdir().expect("tempdir");
        let zeros = vec![0u8; 256 * 256];
        let view = |dtype, shape: Vec<usize>, bytes: usize| {
            TensorView::new(dtype, shape, &zeros[..bytes]).expect("view")
        };
        let tensors = vec![
            ("l.weight", view(St::U32, vec![64, 16], 64 * 16 * 4)),
            ("l.scales", view(St::F16, vec![64, 2], 64 * 2 * 2)),
            ("l.biases", view(St::F16, vec![64, 2], 64 * 2 * 2)),
            ("f.weight", view(St::F8_E4M3, vec![256, 256], 256 * 256)),
            ("f.weight_scale_inv", view(St::F32, vec![2, 2], 16)),
        ];
        safetensors::serialize_to_file(tensors, None, &dir.path().join("model.safetensors"))
            .expect("write");
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"quantization":{"group_size":64,"bits":4}}"#,
        )
        .expect("config");
        let checkpoint = Checkpoint::open(dir.path()).expect("open");
        let summary = checkpoint.summary();
        let all = roles(&checkpoint, &summary);
        let tensors = checkpoint.tensors();
        let mut seen = 0;
        for i in 0..all.len() {
            let Some(role) = all.get(i) else { continue };
            seen += 1;
            let mut ours = Vec::new();
            push_role(
                &mut ours,
                role,
                tensors.at(i),
                &checkpoint,
                &summary,
                &mut RecentFields::default(),
            );
            let theirs = match role {
                Role::PartOf(owner) => {
                    let mut buf = b",\"part_of\":".to_vec();
                    serde_json::to_writer(&mut buf, tensors.at(owner).name()).expect("write");
                    buf
                }
                Role::Quantized(k) => {
                    let t = &summary.quantization.as_ref().expect("quantized").tensors[k];
                    let value = serde_json::json!({
                        "mode": t.params.mode.name(),
                        "bits": t.params.bits,
                        "group_size": t.params.group_size,
                        "shape": t.logical_shape,
                        "inferred": t.inferred,
                        "bits_per_weight": t.bits_per_weight(&checkpoint),
                    });
                    let mut buf = b",\"quantized\":".to_vec();
                    serde_json::to_writer(&mut buf, &value).expect("write");
                    buf
                }
                Role::Fp8(k) => {
                    let t = &summary.fp8.as_ref().expect("fp8").tensors[k];
                    let value = serde_json::json!({
                        "mode": "fp8",
                        "format": t.format.name(),
                        "block": t.block,
                        "shape": tensors.at(t.weight).shape(),
                    });
                    let mut buf = b",\"quantized\":".to_vec();
                    serde_json::to_writer(&mut buf, &value).expect("write");
                    buf
                }
            };
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "{}",
                tensors.at(i).name()
            );
        }
        assert_eq!(seen, 5, "every tensor has a role: {all:?}");
    }
}
