//! Materializing one tensor for people: timings, device, statistics,
//! histogram, first values, heatmap; MLX-quantized weights dequantized.

use std::time::Instant;

use crate::checkpoint::Dtype;
use crate::mlx::{self, ValueSummary};

use super::{Decoding, Native, Weights, WeightsError};

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
    pub values: ValueSummary,
    /// The view's fix-ups that changed this value (empty: none).
    pub fixups: Vec<String>,
    /// The stored value's summary before the fix-ups, when there were any.
    pub before_fixup: Option<ValueSummary>,
    /// For an MLX-quantized weight: heatmaps of its per-group scales and biases.
    pub quant_maps: Option<QuantMaps>,
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

impl<N: Native> Weights<N> {
    /// Materializes `name` (cached like [`Weights::tensor`]) and summarizes its
    /// values with MLX on the default device. A packed MLX-quantized weight is
    /// dequantized first, and the preview says so.
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
            .clone();
        let shard = self.checkpoint.shards()[info.shard].file.clone();
        let device = mlx::default_device().map_or_else(|_| "unknown".to_owned(), |d| d.name());

        let start = Instant::now();
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
            self.note_resident(stored);
        }
        let quant_maps = match &values.scales {
            Some(scales) => {
                let map = |a: &mlx::Array| -> Result<Option<mlx::Heatmap>, WeightsError> {
                    Ok(mlx::summarize(a, 1, 2, options.heatmap)?.heatmap)
                };
                Some(QuantMaps {
                    scales: map(scales)?,
                    biases: values.biases.as_ref().map(map).transpose()?.flatten(),
                })
            }
            None => None,
        };
        let decoding = values.decoding;
        let values = values.array;
        let materialize_millis = start.elapsed().as_secs_f64() * 1e3;

        let start = Instant::now();
        let summary = mlx::summarize(&values, options.first, options.bins, options.heatmap)?;
        let (fixups, before_fixup) = if self.is_fixed(name) {
            let rules = self
                .view_info()
                .map(|v| v.fixups_for(name).into_iter().map(str::to_owned).collect())
                .unwrap_or_default();
            let raw = self.stored_of(name)?;
            let before = mlx::summarize(&raw, options.first, options.bins, options.heatmap)?;
            (rules, Some(before))
        } else {
            (Vec::new(), None)
        };
        let summary_millis = start.elapsed().as_secs_f64() * 1e3;
        Ok(TensorPreview {
            name: name.to_owned(),
            stored_name: info.name.clone(),
            dtype: info.dtype,
            shape: info.shape.clone(),
            bytes: info.bytes(),
            shard,
            device,
            materialize_millis,
            summary_millis,
            value_shape: values.shape().to_vec(),
            decoding,
            values: summary,
            fixups,
            before_fixup,
            quant_maps,
        })
    }
}
