//! The `tensors` array of `inspect --json`, written by hand (a measured
//! fast path; the unit tests in `inspect` pin it to what `serde_json` writes).

use std::io::{self, Write};

use crate::checkpoint::{Checkpoint, Summary, TensorRef};
use crate::units::json_plain_run;

/// Writes the `tensors` array's elements to `out`, in order. The list (14 MB
/// for 90k tensors) is serialized piece by piece on every core and written as
/// the pieces come in order (see [`crate::cli::pieces::write_in_pieces`]).
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
pub(super) fn write_tensor_list(
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
    crate::cli::pieces::write_in_pieces(tensors.len(), b",", &serialize, out)
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
pub(super) struct Roles(Vec<u64>);

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
pub(super) fn roles(checkpoint: &Checkpoint, summary: &Summary) -> Roles {
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

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::super::text::name_column_width;
    use super::super::{write_json, write_text};
    use super::*;
    use crate::checkpoint::Dtype;
    use crate::units::{Shown, human_bytes};

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
        write_json(
            crate::cli::inspect::HeaderReport {
                checkpoint: &checkpoint,
                summary: &checkpoint.summary(),
                kept: None,
            },
            &mut out,
        )
        .expect("write");
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
        write_text(
            crate::cli::inspect::HeaderReport {
                checkpoint: &checkpoint,
                summary: &summary,
                kept: None,
            },
            &mut ours,
        )
        .expect("write");
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
