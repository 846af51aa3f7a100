//! `weightscope tensor PATH NAME [--json]`: one tensor materialized through MLX.

use std::io::{self, Write};

use serde::Serialize;

use crate::units::{Shown, grouped, human_bytes};
use crate::weights::{Decoding, TensorPreview};

/// Statistics as `tensor --json` and `diff --tensor --json` give them.
#[derive(Serialize)]
pub(super) struct JsonStats {
    min: f64,
    max: f64,
    mean: f64,
    std: f64,
    nan: u64,
    inf: u64,
}

impl From<&crate::mlx::Stats> for JsonStats {
    fn from(s: &crate::mlx::Stats) -> Self {
        Self {
            min: s.min,
            max: s.max,
            mean: s.mean,
            std: s.std,
            nan: s.nan,
            inf: s.inf,
        }
    }
}

#[derive(Serialize)]
struct JsonHistogram<'a> {
    min: f64,
    max: f64,
    counts: &'a [u64],
}

#[derive(Serialize)]
struct JsonHeatmap<'a> {
    rows: usize,
    cols: usize,
    row_step: usize,
    col_step: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<&'a [f32]>,
    /// Each cell's largest |value| (with `values`).
    #[serde(skip_serializing_if = "Option::is_none")]
    max_abs: Option<&'a [f32]>,
}

#[derive(Serialize)]
struct JsonTensor<'a> {
    name: &'a str,
    stored_name: &'a str,
    dtype: &'static str,
    shape: &'a [u64],
    bytes: u64,
    shard: &'a str,
    device: &'a str,
    stats: JsonStats,
    first: &'a [f32],
    millis: f64,
    stats_millis: f64,
    /// Every summary's time with `--repeat` (the fastest is `stats_millis`).
    #[serde(skip_serializing_if = "<[f64]>::is_empty")]
    stats_millis_runs: &'a [f64],
    /// With `--warm-up`: how long preparing the summary kernels took.
    #[serde(skip_serializing_if = "Option::is_none")]
    warm_up_millis: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quantized: Option<JsonQuantized<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decoded: Option<String>,
    histogram: JsonHistogram<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heatmap: Option<JsonHeatmap<'a>>,
}

/// How a `tensor` run went beside the preview: every summary's time when
/// `--repeat` asked for more than one, the warm-up's with `--warm-up`.
#[derive(Debug, Clone, Default)]
pub struct Timings {
    /// Every summary's time, in order (empty for one).
    pub runs: Vec<f64>,
    /// The warm-up's time.
    pub warm_up_millis: Option<f64>,
}

/// Writes `preview` as one JSON object with `timings`; `cells`: the
/// heatmap's cell values too (`--cells`).
///
/// # Errors
/// When writing fails.
pub fn write_json(
    preview: &TensorPreview,
    timings: &Timings,
    cells: bool,
    out: &mut impl Write,
) -> io::Result<()> {
    let s = &preview.values.stats;
    let doc = JsonTensor {
        name: &preview.name,
        stored_name: &preview.stored_name,
        dtype: preview.stored_type(),
        shape: &preview.shape,
        bytes: preview.bytes,
        shard: &preview.shard,
        device: &preview.device,
        // A tensor with no finite value has NaN statistics: serde_json writes
        // them as `null`, which is what JSON readers expect.
        stats: JsonStats::from(s),
        first: &preview.values.first,
        millis: preview.materialize_millis,
        stats_millis: preview.summary_millis,
        stats_millis_runs: if timings.runs.len() > 1 {
            &timings.runs
        } else {
            &[]
        },
        warm_up_millis: timings.warm_up_millis,
        quantized: preview.decoding.as_ref().and_then(quantized_json),
        decoded: preview.decoding.as_ref().map(Decoding::describe),
        histogram: JsonHistogram {
            min: preview.values.histogram.min,
            max: preview.values.histogram.max,
            counts: &preview.values.histogram.counts,
        },
        heatmap: preview.values.heatmap.as_ref().map(|h| JsonHeatmap {
            rows: h.rows,
            cols: h.cols,
            row_step: h.row_step,
            col_step: h.col_step,
            values: cells.then_some(h.values.as_slice()),
            max_abs: preview
                .values
                .heatmap_max_abs
                .as_ref()
                .filter(|_| cells)
                .map(|m| m.values.as_slice()),
        }),
    };
    super::json_line(out, &doc)
}

/// Writes `preview` for people.
///
/// # Errors
/// When writing fails.
pub fn write_text(preview: &TensorPreview, out: &mut impl Write) -> io::Result<()> {
    let s = &preview.values.stats;
    writeln!(out, "tensor      {}", Shown::new(&preview.name))?;
    if preview.stored_name != preview.name {
        writeln!(out, "stored as   {}", Shown::new(&preview.stored_name))?;
    }
    writeln!(
        out,
        "dtype       {}  shape {:?}  {} in {}",
        preview.stored_type(),
        preview.shape,
        human_bytes(preview.bytes),
        preview.shard
    )?;
    if let Some(decoding) = &preview.decoding {
        writeln!(out, "decoded     {}", decoding.describe())?;
    }
    writeln!(
        out,
        "device      {}  materialized in {:.1} ms, statistics in {:.1} ms",
        preview.device, preview.materialize_millis, preview.summary_millis
    )?;
    writeln!(
        out,
        "stats       min {:.6e}  max {:.6e}  mean {:.6e}  std {:.6e}",
        s.min, s.max, s.mean, s.std
    )?;
    writeln!(
        out,
        "            NaN {}  Inf {}  finite {}",
        grouped(s.nan),
        grouped(s.inf),
        grouped(s.finite)
    )?;
    let first: Vec<String> = preview
        .values
        .first
        .iter()
        .take(16)
        .map(|v| format!("{v:.6}"))
        .collect();
    writeln!(out, "first       {}", first.join(" "))?;
    write_histogram(&preview.values.histogram, s.finite, out)
}

/// The most rows the text histogram has, and its longest bar.
const HISTOGRAM_ROWS: usize = 16;
const HISTOGRAM_BAR: u64 = 40;

/// The histogram as text: at most 16 rows (adjacent bins merged), each its
/// range, its count and a bar scaled to the largest row.
fn write_histogram(h: &crate::mlx::Histogram, finite: u64, out: &mut impl Write) -> io::Result<()> {
    if finite == 0 || h.counts.is_empty() {
        return writeln!(out, "histogram   no finite values");
    }
    #[allow(clippy::float_cmp)] // one value: the range is exactly empty
    if h.min == h.max {
        return writeln!(
            out,
            "histogram   every finite value is {:.6e}{}",
            h.min,
            if h.min.abs() < f64::MIN_POSITIVE {
                " (all zeros)"
            } else {
                ""
            }
        );
    }
    let per_row = h.counts.len().div_ceil(HISTOGRAM_ROWS);
    let rows: Vec<u64> = h.counts.chunks(per_row).map(|c| c.iter().sum()).collect();
    let most = rows.iter().copied().max().unwrap_or(1).max(1);
    #[allow(clippy::cast_precision_loss)] // bin edges for reading
    let width = (h.max - h.min) / h.counts.len() as f64;
    writeln!(
        out,
        "histogram   {} bins over [{:.4e}, {:.4e}], {} a row",
        h.counts.len(),
        h.min,
        h.max,
        per_row
    )?;
    for (i, count) in rows.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)] // bin edges for reading
        let lo = h.min + width * (i * per_row) as f64;
        #[allow(clippy::cast_precision_loss)]
        let hi = (h.min + width * ((i + 1) * per_row) as f64).min(h.max);
        // A row with values has at least one mark.
        let marks = if *count == 0 {
            0
        } else {
            (count * HISTOGRAM_BAR).div_ceil(most)
        };
        writeln!(
            out,
            "  {lo:>12.4e} .. {hi:<12.4e} {:>12}  {}",
            grouped(*count),
            "#".repeat(usize::try_from(marks).unwrap_or(0))
        )?;
    }
    Ok(())
}

/// The `quantized` object of a decoded weight: {`mode`, `bits`,
/// `group_size`, `shape`} for MLX quantization, {`mode`: "fp8", `format`,
/// `block`, `shape`} for FP8 (`shape` is the logical shape).
fn quantized_json(decoding: &Decoding) -> Option<JsonQuantized<'_>> {
    match decoding {
        Decoding::Quantized { params, shape } => Some(JsonQuantized::Packed {
            mode: params.mode.name(),
            bits: params.bits,
            group_size: params.group_size,
            shape,
        }),
        Decoding::Fp8 {
            format,
            block,
            block_inferred,
            shape,
        } => Some(JsonQuantized::Fp8 {
            mode: "fp8",
            format: format.name(),
            block: *block,
            block_inferred: *block_inferred,
            shape,
        }),
        Decoding::Ggml { kind, shape } => Some(JsonQuantized::Ggml {
            mode: "ggml",
            kind: kind.name,
            bits_per_weight: kind.bits_per_value(),
            shape,
        }),
        Decoding::Scales { .. } => None,
    }
}

/// `tensor --json`'s `quantized`: how the stored values were decoded, and
/// the logical shape.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum JsonQuantized<'a> {
    /// An MLX quantization mode (affine, mxfp4, mxfp8, nvfp4).
    Packed {
        mode: &'static str,
        bits: u64,
        group_size: u64,
        shape: &'a [u64],
    },
    /// FP8 codes, with their scale blocks.
    Fp8 {
        mode: &'static str,
        format: &'static str,
        block: Option<[u64; 2]>,
        block_inferred: bool,
        shape: &'a [u64],
    },
    /// A ggml block type (GGUF).
    Ggml {
        mode: &'static str,
        #[serde(rename = "type")]
        kind: &'static str,
        bits_per_weight: f64,
        shape: &'a [u64],
    },
}

/// What `weightscope tensor` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct TensorArgs {
    /// A folder, one `.safetensors` or `.gguf` file, a Hub repo (`hf://ORG/REPO[@REV]`) or an `https://` address of one file.
    pub path: std::path::PathBuf,
    /// The tensor's name (as stored).
    pub name: String,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Summarize the values N times and report the fastest summary (for
    /// benchmarks: on CUDA the first one includes compiling kernels).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// With --json: the heatmap's cell values too (`heatmap.values`, each
    /// cell's mean, and `heatmap.max_abs`, each cell's largest |value|, row
    /// by row).
    #[arg(long, requires = "json")]
    pub cells: bool,
    /// Prepare the summary kernels before the first summary, as the
    /// window does after it opens a checkpoint (on CUDA: compile them, or
    /// load them from MLX's kernel cache); JSON gains `warm_up_millis`.
    #[arg(long)]
    pub warm_up: bool,
}

/// `weightscope tensor`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &TensorArgs) -> u8 {
    let (path, name, repeat) = (args.path.as_path(), args.name.as_str(), args.repeat);
    let json = args.json.then_some(args.cells);
    let Some(checkpoint) = super::ok_or_said(super::open_checkpoint(path)) else {
        return super::BAD_INPUT;
    };
    // A torch pickle that imports what the reader does not understand is
    // said before anything is read (nothing it names is ever called).
    super::warn_of_imports(
        &checkpoint,
        "torch.load would call it; it was not called here",
        path,
    );
    // A bad shard elsewhere does not stop reading a tensor from a good one.
    if checkpoint.tensor(name).is_none() {
        let problems = checkpoint.fatal_problems();
        if let Some(problem) = problems.first() {
            super::stderr_line(format_args!("{problem}"));
        } else {
            let names = checkpoint
                .tensors()
                .iter()
                .map(crate::checkpoint::TensorRef::name);
            match super::closest(name, names) {
                Some(close) => super::stderr_line(format_args!(
                    "no tensor named `{name}` (did you mean `{close}`?): {}",
                    path.display()
                )),
                None => {
                    super::stderr_line(format_args!(
                        "no tensor named `{name}`: {}",
                        path.display()
                    ));
                }
            }
        }
        return super::BAD_INPUT;
    }
    let mut weights =
        match crate::weights::Weights::open_with(checkpoint, crate::weights::MlxLoader) {
            Ok(weights) => weights,
            Err(err) => {
                super::stderr_line(format_args!("{err}"));
                return super::BAD_INPUT;
            }
        };
    // Repeated summaries (benchmarks) and a warm-up amortize compiling our
    // CUDA kernels; a one-shot command does not.
    crate::mlx::use_summary_kernel(repeat > 1 || args.warm_up);
    let mut timings = Timings::default();
    if args.warm_up {
        let start = std::time::Instant::now();
        crate::mlx::warm_up_summaries();
        timings.warm_up_millis = Some(start.elapsed().as_secs_f64() * 1e3);
    }
    let mut best: Option<crate::weights::TensorPreview> = None;
    let runs = &mut timings.runs;
    for _ in 0..repeat {
        match weights.preview(name, &crate::weights::PreviewOptions::default()) {
            Ok(preview) => {
                runs.push(preview.summary_millis);
                if best
                    .as_ref()
                    .is_none_or(|b| preview.summary_millis < b.summary_millis)
                {
                    // The first run's materialization is the one that read the bytes.
                    let materialize_millis = best
                        .as_ref()
                        .map_or(preview.materialize_millis, |b| b.materialize_millis);
                    best = Some(crate::weights::TensorPreview {
                        materialize_millis,
                        ..preview
                    });
                }
            }
            Err(err) => {
                super::stderr_line(format_args!("tensor `{name}`: {err}"));
                return 1;
            }
        }
    }
    let Some(preview) = best else {
        return 1;
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = if let Some(cells) = json {
        write_json(&preview, &timings, cells, &mut out)
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        write_text(&preview, &mut shown).and_then(|()| shown.finish().map(drop))
    };
    super::output_status(written).map_or_else(|code| code, |()| 0)
}
