//! Materializing one tensor for people: timings, device, statistics,
//! histogram, first values, heatmap; MLX-quantized weights dequantized.

use std::time::Instant;

use crate::checkpoint::Dtype;
use crate::mlx::{self, ValueStats};

use super::{Decoding, ShardLoader, Weights, WeightsError};
use crate::checkpoint::{Encoding, Fp8Tensor};

/// How much of the values a preview copies to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviewOptions {
    /// First values to show.
    pub first: usize,
    /// Histogram bins.
    pub bins: usize,
    /// Largest heatmap side, in cells.
    pub heatmap: usize,
}

impl Default for PreviewOptions {
    fn default() -> Self {
        Self {
            first: 64,
            bins: 64,
            heatmap: 512,
        }
    }
}

/// A materialized tensor, described.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPreview {
    /// Canonical name.
    pub name: String,
    /// Name stored in the file.
    pub stored_name: String,
    /// Stored dtype.
    pub dtype: Dtype,
    /// Stored shape.
    pub shape: Vec<u64>,
    /// Bytes on disk.
    pub bytes: u64,
    /// Shard file.
    pub shard: String,
    /// MLX device that evaluated it (`gpu:0`, `cpu:0`).
    pub device: String,
    /// Time to read and evaluate the tensor, in milliseconds.
    pub materialize_millis: f64,
    /// Time to compute the value summary, in milliseconds.
    pub summary_millis: f64,
    /// Shape of the values summarized (the dequantized shape for quantized weights).
    pub value_shape: Vec<i32>,
    /// Set when the values shown were decoded: an MLX-quantized weight
    /// dequantized, FP8 decoded (and block-scaled), fp-mode scales decoded.
    pub decoding: Option<Decoding>,
    /// Statistics, histogram, first values, heatmap.
    pub values: ValueStats,
    /// The view's fix-ups that changed this value (empty: none).
    pub fixups: Vec<String>,
    /// The stored value's summary before the fix-ups, when there were any.
    pub before_fixup: Option<ValueStats>,
    /// For an MLX-quantized weight: heatmaps of its per-group scales and biases.
    pub quant_maps: Option<QuantMaps>,
}

impl TensorPreview {
    /// How the tensor is stored, by name: its dtype, or a GGUF tensor's
    /// ggml type (`Q4_K`), whose bytes the table holds as `U8`.
    #[must_use]
    pub fn stored_type(&self) -> &'static str {
        match &self.decoding {
            Some(super::Decoding::Ggml { kind, .. }) => kind.name,
            _ => self.dtype.name(),
        }
    }
}

/// Heatmaps of a quantized weight's per-group scales and biases (or of an
/// FP8 weight's block scale), as decoded values.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantMaps {
    /// Scales (rows x groups), decoded (E8M0, E4M3) and downsampled like any heatmap.
    pub scales: Option<mlx::Heatmap>,
    /// Biases, when the layout has them.
    pub biases: Option<mlx::Heatmap>,
}

impl<N: ShardLoader> Weights<N> {
    /// Materializes `name` (cached like [`Weights::tensor`]) and summarizes its
    /// values with MLX on the default device. A packed MLX-quantized or
    /// block-scaled FP8 weight is decoded chunk by chunk inside the summary,
    /// and the preview says so.
    ///
    /// # Errors
    /// No such tensor, or an MLX failure (unreadable shard, memory limit).
    pub fn preview(
        &mut self,
        name: &str,
        options: &PreviewOptions,
    ) -> Result<TensorPreview, WeightsError> {
        let info = self
            .info(name)
            .ok_or_else(|| WeightsError::NoTensor(name.to_owned()))?
            .to_info();
        let shard = self.checkpoint.shard(info.shard()).file.clone();
        let device = mlx::default_device().map_or_else(|_| "unknown".to_owned(), |d| d.name());

        let Decoded {
            summary,
            value_shape,
            decoding,
            quant_maps,
            materialize_millis,
            summary_start: start,
        } = self.decode_and_summarize(name, options)?;
        let (fixups, before_fixup) = if self.is_fixed(name) {
            let rules = self
                .view_info()
                .map(|v| v.fixups_for(name).into_iter().map(str::to_owned).collect())
                .unwrap_or_default();
            // The stored array is values only when nothing decodes it: a
            // packed, block-quantized (GGUF) or FP8 tensor's are codes
            // (min 0, max 255 of its bytes), never shown as values.
            let before = if decoding.is_none() {
                let raw = self.stored_of(name)?;
                Some(mlx::summarize(
                    &raw,
                    options.first,
                    options.bins,
                    options.heatmap,
                )?)
            } else {
                None
            };
            (rules, before)
        } else {
            (Vec::new(), None)
        };
        let summary_millis = start.elapsed().as_secs_f64() * 1e3;
        Ok(TensorPreview {
            name: name.to_owned(),
            stored_name: info.name().to_owned(),
            dtype: info.dtype(),
            shape: info.shape().to_vec(),
            bytes: info.bytes(),
            shard,
            device,
            materialize_millis,
            summary_millis,
            value_shape,
            decoding,
            values: summary,
            fixups,
            before_fixup,
            quant_maps,
        })
    }
}

/// On MLX's CPU backend, packed weights up to this size in `f32` are
/// decoded whole before they are summarized; larger ones band by band.
const WHOLE_DECODE_BYTES: u64 = 1 << 30;

/// A tensor's values decoded and summarized, and when the summary began.
struct Decoded {
    summary: ValueStats,
    value_shape: Vec<i32>,
    decoding: Option<Decoding>,
    quant_maps: Option<QuantMaps>,
    materialize_millis: f64,
    summary_start: Instant,
}

impl<N: ShardLoader> Weights<N> {
    /// Reads `name`'s stored bytes and summarizes its values. Packed and
    /// block-scaled weights are decoded chunk by chunk inside the summary:
    /// the stored bytes are all that is read, and the whole tensor never
    /// exists in `f32`.
    fn decode_and_summarize(
        &mut self,
        name: &str,
        options: &PreviewOptions,
    ) -> Result<Decoded, WeightsError> {
        // Decoded size in f32 of a packed or block-scaled weight.
        let decoded_bytes = match self.encoding(name) {
            Some(Encoding::Packed(q)) => Some(q.logical_shape.iter().product::<u64>() * 4),
            Some(Encoding::Fp8(Fp8Tensor { scale: Some(_), .. }) | Encoding::Ggml(_)) => self
                .info(name)
                .map(|i| i.shape().iter().product::<u64>() * 4),
            _ => None,
        };
        // On a GPU decoding per band costs nothing; MLX's CPU backend
        // dequantizes slowly, and per band it does so once per pass: there
        // the whole tensor is decoded once unless it is large.
        let gpu = mlx::default_device().is_ok_and(|d| d.kind == mlx::DeviceKind::Gpu);
        // A tensor of more values than an MLX axis holds (2^31-1) cannot be
        // flattened whole: it is summarized in bands of rows, as `check
        // --values`, `walk` and `diff` read it.
        let elements: u64 = self.info(name).map_or(0, |i| i.shape().iter().product());
        let per_band = elements > i32::MAX as u64
            || decoded_bytes.is_some_and(|b| gpu || b > WHOLE_DECODE_BYTES);
        let map = |a: &mlx::Array| -> Result<Option<mlx::Heatmap>, WeightsError> {
            Ok(mlx::summarize(a, 1, 2, options.heatmap)?.heatmap)
        };
        let start = Instant::now();
        if per_band {
            let bands = self.bands(name)?;
            self.check_room(name, mlx::summary_scratch_bytes())?;
            bands.materialize()?;
            for stored in &bands.stored {
                self.note_resident(name, stored);
            }
            let quant_maps = match &bands.scales {
                Some(scales) => Some(QuantMaps {
                    scales: map(scales)?,
                    biases: bands.biases().map(map).transpose()?.flatten(),
                }),
                None => None,
            };
            let materialize_millis = start.elapsed().as_secs_f64() * 1e3;
            let summary_start = Instant::now();
            let summary =
                mlx::summarize_bands(&bands, options.first, options.bins, options.heatmap)?;
            return Ok(Decoded {
                summary,
                value_shape: bands.shape.clone(),
                decoding: bands.decoding,
                quant_maps,
                materialize_millis,
                summary_start,
            });
        }
        let values = self.values(name)?;
        // The decoded values are f32 beside the stored bytes.
        let logical: u64 = values
            .decoding
            .as_ref()
            .and_then(Decoding::shape)
            .map_or(0, |shape| shape.iter().product::<u64>() * 4);
        self.check_room(name, logical)?;
        mlx::evaluate(&values.array)?;
        for stored in &values.stored {
            self.note_resident(name, stored);
        }
        let quant_maps = match &values.scales {
            Some(scales) => Some(QuantMaps {
                scales: map(scales)?,
                biases: values.biases.as_ref().map(map).transpose()?.flatten(),
            }),
            None => None,
        };
        let materialize_millis = start.elapsed().as_secs_f64() * 1e3;
        let summary_start = Instant::now();
        let summary = mlx::summarize(&values.array, options.first, options.bins, options.heatmap)?;
        Ok(Decoded {
            summary,
            value_shape: values.array.shape().to_vec(),
            decoding: values.decoding,
            quant_maps,
            materialize_millis,
            summary_start,
        })
    }
}
