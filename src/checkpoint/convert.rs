//! PyTorch files to safetensors, without Python: each `.bin`/`.pth` file
//! becomes one `.safetensors` file (so a sharded folder stays sharded as it
//! was, with a `model.safetensors.index.json`), each tensor written
//! contiguous (a view gathered through its strides), a tied name (the same
//! view of the same storage under a second name, as `lm_head` tied to
//! `embed_tokens`) written once, as transformers' `save_pretrained` does.
//! Every file is written whole or not at all (through [`crate::files`]),
//! never inside the checkpoint read.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Checkpoint, ShardId};

/// Bytes of a contiguous tensor read at a time.
const PIECE_BYTES: u64 = 64 << 20;
/// The largest side file (config.json, tokenizer files) copied beside.
const SIDE_FILE_BYTES: u64 = 64 << 20;

/// What a conversion wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Converted {
    /// Each file written, with its bytes, in order.
    pub files: Vec<(String, u64)>,
    /// Tensors written.
    pub tensors: usize,
    /// Names left out as tied to another written tensor: (left out, kept).
    pub tied: Vec<(String, String)>,
    /// Files of the folder copied as they are (config.json, tokenizer).
    pub copied: Vec<String>,
    /// Whether a cancel stopped it (the files written so far are whole).
    pub cancelled: bool,
}

/// Why a conversion stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// Only PyTorch checkpoints are converted.
    #[error("convert reads PyTorch files (.bin, .pth, .pt); this checkpoint is {0}")]
    NotTorch(&'static str),
    /// The checkpoint's bytes could not be read.
    #[error(transparent)]
    Read(#[from] super::CheckpointError),
    /// An output could not be written.
    #[error(transparent)]
    Write(#[from] crate::files::FileError),
    /// A view reaches past its storage.
    #[error("tensor `{0}`: its strides reach past its storage")]
    View(String),
}

/// The safetensors name of torch file `file`: `pytorch_model-00001-of-00002.bin`
/// becomes `model-00001-of-00002.safetensors`, `pytorch_model.bin`
/// `model.safetensors`, `x.pth` `x.safetensors`.
#[must_use]
pub fn safetensors_name(file: &str) -> String {
    let stem = file
        .rsplit_once('.')
        .map_or(file, |(stem, _)| stem)
        .rsplit('/')
        .next()
        .unwrap_or(file);
    let stem = stem.strip_prefix("pytorch_").unwrap_or(stem);
    format!("{stem}.safetensors")
}

/// Converts the PyTorch checkpoint `checkpoint` into safetensors files in
/// the folder `out` (made if absent), calling `progress(done, total)` in
/// tensors; `cancel` stops it between files.
///
/// # Errors
/// A checkpoint that is not PyTorch files, `out` inside it or unwritable,
/// bytes that cannot be read.
pub fn to_safetensors(
    checkpoint: &Checkpoint,
    out: &Path,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Converted, ConvertError> {
    if !checkpoint.is_torch() {
        return Err(ConvertError::NotTorch(if checkpoint.is_gguf() {
            "a GGUF file"
        } else {
            "safetensors already"
        }));
    }
    let root = checkpoint.root();
    crate::files::make_output_folder(out, &[root])?;
    let tensors = checkpoint.tensors();
    let total = tensors.len();
    let mut done = 0;
    let mut report = Converted::default();
    let mut weight_map: BTreeMap<String, String> = BTreeMap::new();
    let mut total_size = 0_u64;
    for (k, shard) in checkpoint.shards().iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            report.cancelled = true;
            break;
        }
        let name = safetensors_name(&shard.file);
        let mut kept = Vec::new();
        for t in tensors.iter_range(shard.tensors.clone()) {
            let at = checkpoint.torch_tensor_at(t.position());
            match at.and_then(|a| a.same_view.then_some(a.tied_to).flatten()) {
                Some(first) => report
                    .tied
                    .push((t.name().to_owned(), tensors.at(first).name().to_owned())),
                None => kept.push(t),
            }
        }
        // Written in file order; the header's offsets follow it.
        let mut header = serde_json::Map::new();
        let mut meta = serde_json::Map::new();
        meta.insert("format".into(), "pt".into());
        header.insert("__metadata__".into(), meta.into());
        let mut at = 0_u64;
        for t in &kept {
            let end = at + t.bytes();
            header.insert(
                t.name().to_owned(),
                serde_json::json!({
                    "dtype": t.dtype().name(),
                    "shape": t.shape(),
                    "data_offsets": [at, end],
                }),
            );
            weight_map.insert(t.name().to_owned(), name.clone());
            at = end;
        }
        total_size += at;
        let mut text = serde_json::to_vec(&header).unwrap_or_default();
        text.resize(text.len().div_ceil(8) * 8, b' ');
        let output = crate::files::check_output(&out.join(&name), &[root])?;
        let bytes = checkpoint.shard_bytes(ShardId(k));
        let mut failure: Option<ConvertError> = None;
        output
            .write_with(&mut |w| {
                w.write_all(&(text.len() as u64).to_le_bytes())?;
                w.write_all(&text)?;
                for t in &kept {
                    if let Err(e) = write_tensor(checkpoint, &bytes, *t, w) {
                        let io = std::io::Error::other(e.to_string());
                        failure = Some(e);
                        return Err(io);
                    }
                }
                Ok(())
            })
            .map_err(|e| failure.take().unwrap_or(ConvertError::Write(e)))?;
        done += shard.tensors.len();
        progress(done, total);
        report.tensors += kept.len();
        report.files.push((name, 8 + text.len() as u64 + at));
    }
    if checkpoint.shards().len() > 1 && !report.cancelled {
        let index = serde_json::json!({
            "metadata": { "total_size": total_size },
            "weight_map": weight_map,
        });
        let mut text = serde_json::to_vec_pretty(&index).unwrap_or_default();
        text.push(b'\n');
        let name = "model.safetensors.index.json";
        crate::files::check_output(&out.join(name), &[root])?.write(&text)?;
        report.files.push((name.to_owned(), text.len() as u64));
    }
    if !report.cancelled {
        copy_side_files(checkpoint, out, &mut report)?;
    }
    Ok(report)
}

/// Writes tensor `t`'s elements, row-major: a contiguous one a piece at a
/// time, a view gathered through its strides.
fn write_tensor(
    checkpoint: &Checkpoint,
    bytes: &super::ShardBytes,
    t: super::TensorRef<'_>,
    w: &mut dyn std::io::Write,
) -> Result<(), ConvertError> {
    let io = |e: std::io::Error| {
        ConvertError::Write(crate::files::FileError::Io {
            action: "write",
            path: checkpoint.root().to_path_buf(),
            source: e,
        })
    };
    let Some(at) = checkpoint.torch_tensor_at(t.position()) else {
        return Ok(());
    };
    let item = t.dtype().bits().div_ceil(8);
    let view = super::pytorch::Strided {
        item_bytes: item,
        shape: t.shape().to_vec(),
        stride: at.stride.clone(),
    };
    let (first, end) = view
        .reach(at.offset)
        .ok_or_else(|| ConvertError::View(t.name().to_owned()))?;
    let start = at.storage_file_offset + first * item;
    if at.contiguous {
        let end = start + t.bytes();
        let mut from = start;
        while from < end {
            let to = (from + PIECE_BYTES).min(end);
            w.write_all(&bytes.read(from..to)?).map_err(io)?;
            from = to;
        }
        return Ok(());
    }
    let span = bytes.read(start..at.storage_file_offset + end * item)?;
    let gathered = view
        .gather(&span)
        .ok_or_else(|| ConvertError::View(t.name().to_owned()))?;
    w.write_all(&gathered).map_err(io)
}

/// Copies the folder's small files a model needs beside its weights
/// (`config.json`, `generation_config.json`, tokenizer files), never the
/// torch files or their index.
fn copy_side_files(
    checkpoint: &Checkpoint,
    out: &Path,
    report: &mut Converted,
) -> Result<(), ConvertError> {
    let root = checkpoint.root();
    if !root.is_dir() {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Ok(());
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let lower = n.to_ascii_lowercase();
            let side = [".json", ".txt", ".model"]
                .iter()
                .any(|ext| lower.ends_with(ext));
            side && !lower.ends_with(".index.json")
        })
        .collect();
    names.sort();
    for name in names {
        let Ok(bytes) =
            crate::files::read_bounded(&root.join(&name), SIDE_FILE_BYTES, "a side file")
        else {
            continue;
        };
        crate::files::check_output(&out.join(&name), &[root])?.write(&bytes)?;
        report.copied.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_names_become_safetensors_names() {
        assert_eq!(
            safetensors_name("pytorch_model-00001-of-00002.bin"),
            "model-00001-of-00002.safetensors"
        );
        assert_eq!(safetensors_name("pytorch_model.bin"), "model.safetensors");
        assert_eq!(safetensors_name("checkpoint.pth"), "checkpoint.safetensors");
    }
}
