//! The seam between the Weights core and MLX's native shard maps.

use std::collections::HashMap;

use crate::checkpoint::{Checkpoint, Dtype, ShardId};
use crate::mlx::{Array, MlxError, ShardMap, Stored};

/// The native MLX calls the Weights core makes. Production uses
/// [`MlxLoader`]; tests wrap it to inject a failure at shard N and count frees.
pub trait ShardLoader {
    /// Opens shard `shard` of `checkpoint` lazily.
    ///
    /// # Errors
    /// When MLX cannot read the file.
    fn open_shard(&mut self, checkpoint: &Checkpoint, shard: ShardId)
    -> Result<ShardMap, MlxError>;

    /// Frees one shard's map (and, with it, every array only it held).
    fn free_shard(&mut self, map: ShardMap) {
        drop(map);
    }

    /// Lets go of the evaluated bytes of stored tensor `name` in `map`: the
    /// next [`ShardLoader::get`] reads them again.
    ///
    /// # Errors
    /// When the map cannot make a fresh handle (MLX cannot read the
    /// header again).
    fn forget(&mut self, map: &mut ShardMap, name: &str) -> Result<(), MlxError> {
        map.forget(name)
    }

    /// A new handle to the stored tensor `name` of `map`.
    ///
    /// # Errors
    /// When a map read through cannot read the tensor's bytes.
    fn get(&mut self, map: &mut ShardMap, name: &str) -> Result<Option<Array>, MlxError> {
        map.get(name)
    }
}

/// The real thing: MLX's own safetensors loader for local files whose
/// dtypes it reads; otherwise (a remote file, an `F8_E5M2`, `F64` or
/// sub-byte tensor) each tensor's bytes read into an MLX-owned array.
#[derive(Debug, Default, Clone, Copy)]
pub struct MlxLoader;

/// The MLX array type a stored dtype is read as (`None`: MLX's loader
/// refuses it and its bytes are read as `uint8`).
fn mlx_dtype(dtype: Dtype) -> Option<crate::mlx::Dtype> {
    use crate::mlx::Dtype as M;
    Some(match dtype {
        Dtype::BOOL => M::Bool,
        Dtype::U8 | Dtype::F8_E4M3 | Dtype::F8_E8M0 => M::Uint8,
        Dtype::I8 => M::Int8,
        Dtype::U16 => M::Uint16,
        Dtype::I16 => M::Int16,
        Dtype::F16 => M::Float16,
        Dtype::BF16 => M::Bfloat16,
        Dtype::U32 => M::Uint32,
        Dtype::I32 => M::Int32,
        Dtype::F32 => M::Float32,
        Dtype::U64 => M::Uint64,
        Dtype::I64 => M::Int64,
        Dtype::C64 => M::Complex64,
        Dtype::F64
        | Dtype::F8_E5M2
        | Dtype::F8_E4M3FNUZ
        | Dtype::F8_E5M2FNUZ
        | Dtype::F4
        | Dtype::F6_E2M3
        | Dtype::F6_E3M2 => return None,
    })
}

/// The read-through form of `dtype`: MLX's own where it has one (`F64`
/// too, which its loader refuses), else bytes for the decoders (`F8_E5M2`);
/// `Err` names a dtype nothing here decodes.
fn through_dtype(dtype: Dtype) -> Result<crate::mlx::Dtype, &'static str> {
    match dtype {
        Dtype::F64 => Ok(crate::mlx::Dtype::Float64),
        Dtype::F8_E5M2 => Ok(crate::mlx::Dtype::Uint8),
        other => mlx_dtype(other).ok_or(other.name()),
    }
}

/// A torch tensor's bytes: the span of its storage its elements reach,
/// and, for a view (a transposed weight, a column slice), its strides.
fn torch_view(
    checkpoint: &Checkpoint,
    t: crate::checkpoint::TensorRef<'_>,
) -> Option<(std::ops::Range<u64>, Option<crate::mlx::Rearrange>)> {
    let at = checkpoint.torch_tensor_at(t.position())?;
    let item = t.dtype().bits().div_ceil(8);
    if at.contiguous {
        return None;
    }
    let view = crate::checkpoint::pytorch::Strided {
        item_bytes: item,
        shape: t.shape().to_vec(),
        stride: at.stride.clone(),
    };
    let (first, end) = view.reach(at.offset)?;
    let span = at
        .storage_file_offset
        .checked_add(first.checked_mul(item)?)?
        ..at.storage_file_offset.checked_add(end.checked_mul(item)?)?;
    let gather = move |bytes: &[u8]| view.gather(bytes);
    Some((
        span,
        Some(crate::mlx::Rearrange(std::sync::Arc::new(gather))),
    ))
}

impl ShardLoader for MlxLoader {
    fn open_shard(
        &mut self,
        checkpoint: &Checkpoint,
        shard: ShardId,
    ) -> Result<ShardMap, MlxError> {
        let s = checkpoint.shard(shard);
        let tensors = checkpoint.tensors().iter_range(s.tensors.clone());
        let refused = || {
            checkpoint
                .tensors()
                .iter_range(s.tensors.clone())
                .any(|t| mlx_dtype(t.dtype()).is_none())
        };
        if checkpoint.remote().is_none()
            && !checkpoint.is_gguf()
            && !checkpoint.is_torch()
            && !refused()
        {
            return ShardMap::open(&s.path);
        }
        let start = s.data_start();
        let stored: HashMap<String, Stored> = tensors
            .map(|t| {
                let (a, b) = t.data_offsets();
                let (dtype, undecoded) = match through_dtype(t.dtype()) {
                    Ok(dtype) => (dtype, None),
                    Err(name) => (crate::mlx::Dtype::Uint8, Some(name)),
                };
                let oversized_axis = t
                    .shape()
                    .iter()
                    .copied()
                    .find(|&d| i32::try_from(d).is_err());
                let shape = if checkpoint.ggml_block_at(t.position()).is_some() {
                    // A ggml block type: its bytes as [rows, bytes a row]
                    // (whole rows are whole blocks), decoded above this layer.
                    let rows = t
                        .shape()
                        .split_last()
                        .map_or(Some(1), |(_, lead)| {
                            lead.iter().try_fold(1_u64, |n, &d| n.checked_mul(d))
                        })
                        .unwrap_or(u64::MAX)
                        .max(1);
                    vec![
                        i32::try_from(rows).unwrap_or(i32::MAX),
                        i32::try_from((b - a) / rows).unwrap_or(i32::MAX),
                    ]
                } else {
                    t.shape()
                        .iter()
                        .map(|&d| i32::try_from(d).unwrap_or(i32::MAX))
                        .collect()
                };
                let (bytes, rearrange) =
                    torch_view(checkpoint, t).unwrap_or((start + a..start + b, None));
                let stored = Stored {
                    dtype,
                    shape,
                    bytes,
                    undecoded,
                    oversized_axis,
                    rearrange,
                };
                (t.name().to_owned(), stored)
            })
            .collect();
        let bytes = checkpoint.shard_bytes(shard);
        let read = Box::new(move |range| {
            bytes
                .read(range)
                .map_err(|e| -> crate::mlx::ReadError { Box::new(e) })
        });
        Ok(ShardMap::read_through(s.path.clone(), stored, read))
    }
}
