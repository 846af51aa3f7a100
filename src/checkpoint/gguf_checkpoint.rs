//! A GGUF file as a checkpoint: one shard whose tensors are listed in the
//! tensor table like a safetensors shard's, so the window, `diff`, `check`
//! and `walk` read it as they read safetensors. Plain ggml types take their
//! safetensors dtype; block types (`Q4_K`, `IQ4_XS`…) are held as their
//! bytes (`U8`) with their logical shape, and their type is kept beside the
//! table ([`Checkpoint::ggml_type_at`]): [`super::Encoding::Ggml`] says how
//! to decode them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::gguf::{GgmlType, GgufHeader, MetaValue};
use super::header::ShardHeader;
use super::table::name_hash;
use super::{Checkpoint, CheckpointError, Dtype, Layout, ShardTensors};

/// The safetensors dtype of a plain ggml type.
fn plain_dtype(kind: GgmlType) -> Option<Dtype> {
    Some(match kind.name {
        "F32" => Dtype::F32,
        "F16" => Dtype::F16,
        "BF16" => Dtype::BF16,
        "F64" => Dtype::F64,
        "I8" => Dtype::I8,
        "I16" => Dtype::I16,
        "I32" => Dtype::I32,
        "I64" => Dtype::I64,
        _ => return None,
    })
}

/// A metadata value in one short line (arrays by their length).
fn short(value: &MetaValue) -> Option<String> {
    Some(match value {
        MetaValue::Int(i) => i.to_string(),
        MetaValue::F32(f) => f.to_string(),
        MetaValue::Float(f) => f.to_string(),
        MetaValue::Bool(b) => b.to_string(),
        MetaValue::Str(s) if s.len() <= 200 => s.clone(),
        MetaValue::Str(_) | MetaValue::Cut { .. } | MetaValue::Array { .. } => return None,
    })
}

impl Checkpoint {
    /// Opens the GGUF file at `path` as a one-shard checkpoint.
    pub(crate) fn open_gguf(path: &Path) -> Result<Self, CheckpointError> {
        let header = GgufHeader::read(path)
            .map_err(|e| CheckpointError::unreadable_for(path, e.to_string()))?;
        let file_bytes = std::fs::metadata(path)
            .map_err(|e| CheckpointError::unreadable(path, &e))?
            .len();
        let file = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Self::from_gguf(header, file_bytes, path.to_path_buf(), file)
    }

    /// The checkpoint of a GGUF file of `file_bytes` bytes whose header is
    /// `header`, shown as `path` (its name in its folder: `file`).
    pub(crate) fn from_gguf(
        header: GgufHeader,
        file_bytes: u64,
        path: PathBuf,
        file: String,
    ) -> Result<Self, CheckpointError> {
        let unreadable = |reason: String| CheckpointError::Unreadable {
            path: path.clone(),
            reason,
        };
        let mut order: Vec<_> = header.tensors.iter().collect();
        order.sort_by_key(|t| t.offset);
        let names_len = order.iter().map(|t| t.name.len()).sum();
        let mut tensors = ShardTensors::with_capacity(order.len(), names_len);
        let mut types = Vec::with_capacity(order.len());
        let mut hashes = Vec::with_capacity(order.len());
        let mut seen = foldhash::HashSet::default();
        for t in order {
            let kind = t.ggml_type().ok_or_else(|| {
                unreadable(format!(
                    "tensor `{}` has ggml type {}, which is not known",
                    t.name, t.type_id
                ))
            })?;
            if !seen.insert(t.name.as_str()) {
                return Err(unreadable(format!("tensor `{}` is listed twice", t.name)));
            }
            let start = t.offset - header.data_start;
            let dtype = plain_dtype(kind).unwrap_or(Dtype::U8);
            if !tensors.push(&t.name, dtype, &t.shape, (start, start + t.bytes)) {
                return Err(unreadable("too many tensors".into()));
            }
            types.push(kind);
            hashes.push(name_hash(&t.name));
        }
        let metadata: BTreeMap<String, String> = header
            .metadata
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), short(v)?)))
            .collect();
        let shard = ShardHeader {
            file_bytes,
            header_bytes: header.data_start.saturating_sub(8),
            metadata,
            tensors,
            name_hashes: Vec::new(),
        };
        let (mut checkpoint, _) = Self::assemble_parsed(
            path.clone(),
            Layout::SingleFile,
            vec![(file, path)],
            vec![Ok((shard, hashes))],
            Vec::new(),
        );
        checkpoint.ggml = Some(types.into());
        checkpoint.gguf = Some(Arc::new(header));
        Ok(checkpoint)
    }

    /// A GGUF file's header (metadata, tensors, what `mx.load` does).
    #[must_use]
    pub fn gguf_header(&self) -> Option<&GgufHeader> {
        self.gguf.as_deref()
    }

    /// Whether the checkpoint is a GGUF file.
    #[must_use]
    pub fn is_gguf(&self) -> bool {
        self.ggml.is_some()
    }

    /// The ggml type of the tensor at position `i` of a GGUF checkpoint.
    #[must_use]
    pub fn ggml_type_at(&self, i: usize) -> Option<GgmlType> {
        self.ggml.as_ref()?.get(i).copied()
    }

    /// The ggml type of the tensor at `i` when it is a block type (held as
    /// bytes, decoded by [`super::Encoding::Ggml`]).
    #[must_use]
    pub fn ggml_block_at(&self, i: usize) -> Option<GgmlType> {
        self.ggml_type_at(i).filter(|k| plain_dtype(*k).is_none())
    }
}
