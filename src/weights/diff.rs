//! The diff of two checkpoints, one tensor at a time on MLX, releasing each
//! shard as soon as the comparison no longer needs it, so two large
//! checkpoints diff within about two shards of memory. Either side may have a
//! view installed: names are compared as the graph sees them.
//!
//! Tensors are compared by their values as people mean them, whatever their
//! dtypes: both sides decoded (MLX-quantized weights dequantized in any
//! mode, FP8 decoded and block-scaled) and compared in f32. A quantized
//! weight's scales and biases, and an FP8 weight's block scale, belong to
//! their weight: they are neither compared alone nor listed as only on one
//! side. `changed` is only for tensors whose logical shapes differ.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;

use serde::Serialize;

use crate::checkpoint::layer_of;
use crate::mlx;

use super::bands::band_rows;
use super::{
    Decoding, InStep, Progress, Release, ShardLoader, Visitor, WalkProgress, Walkable as _, Walker,
    Weights, WeightsError,
};

/// The changed tensors of one module kind stored one way in B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindSummary {
    /// `q_proj`, `down_proj`, `embed_tokens`, …
    pub kind: String,
    /// How B stores them.
    pub b_dtype: String,
    /// How many.
    pub tensors: usize,
    /// Their parameters.
    pub params: u64,
    /// Their median relative error.
    pub median_rel_error: f64,
    /// The worst one's relative error.
    pub worst_rel_error: f64,
    /// The worst one.
    pub worst: String,
}

/// The module kind of a tensor name: its last word that is not a number,
/// before a final `weight`, `bias`, `scales` or `biases`
/// (`model.layers.3.mlp.experts.7.down_proj.weight` is `down_proj`).
#[must_use]
pub fn module_kind(name: &str) -> &str {
    let mut words = name.rsplit('.');
    let mut word = words.next().unwrap_or(name);
    if matches!(word, "weight" | "bias" | "scales" | "biases") {
        word = words.next().unwrap_or(word);
    }
    while !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()) {
        match words.next() {
            Some(next) => word = next,
            None => break,
        }
    }
    word
}

/// The median of `values` (the mean of the middle two for an even count;
/// NaN for none).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        f64::midpoint(values[n / 2 - 1], values[n / 2])
    }
}

/// A tensor both sides have with different logical shapes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// Canonical name.
    pub name: String,
    /// Stored dtype in A, with its encoding (`U32 affine 4-bit g64`).
    pub a_dtype: String,
    /// Logical shape in A (after A's view, dequantized).
    pub a_shape: Vec<i32>,
    /// Stored dtype in B, with its encoding.
    pub b_dtype: String,
    /// Logical shape in B.
    pub b_shape: Vec<i32>,
}

/// How a tensor both sides have (same logical shape) differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Common {
    /// Canonical name.
    pub name: String,
    /// Its layer number, when it is in a numbered layer.
    pub layer: Option<u64>,
    /// Stored dtype in A, with its encoding (`BF16`, `U32 affine 4-bit g64`,
    /// `F8_E4M3 block 128x128`).
    pub a_dtype: String,
    /// Stored dtype in B, with its encoding.
    pub b_dtype: String,
    /// Largest `|a - b|` (null in JSON when NaN).
    pub max_abs_diff: f64,
    /// `‖a - b‖ / ‖a‖` (A is the reference).
    pub rel_error: f64,
    /// `10 log10(‖a‖² / ‖a - b‖²)` in dB (null in JSON when infinite: equal).
    pub snr_db: f64,
    /// `a·b / (‖a‖ ‖b‖)`.
    pub cosine: f64,
    /// Whether either side has a NaN.
    pub nan: bool,
    /// Whether either side has an infinity.
    pub inf: bool,
    /// Its logical element count (parameters), which weights the overall
    /// figure.
    pub params: u64,
    /// `‖a - b‖²`, for the overall figure.
    #[serde(skip)]
    pub diff_sq: f64,
    /// `‖a‖²`, for the overall figure.
    #[serde(skip)]
    pub a_sq: f64,
}

/// A tensor that could not be compared (its shard failed to load, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffFailure {
    /// Canonical name.
    pub name: String,
    /// Why.
    pub error: String,
}

/// The diff of A against B.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct DiffReport {
    /// Canonical names only A has, sorted.
    pub only_in_a: Vec<String>,
    /// Canonical names only B has, sorted.
    pub only_in_b: Vec<String>,
    /// Names one side has only as a tied name (a PyTorch file's second name
    /// for the same view of one storage, `lm_head` tied to `embed_tokens`)
    /// whose first name both sides have: (tied name, its first name). Not
    /// a difference: safetensors writers keep such a name once.
    pub tied: Vec<(String, String)>,
    /// Names with a different shape or dtype.
    pub changed: Vec<Changed>,
    /// Names compared value by value, in A's walk order.
    pub common: Vec<Common>,
    /// Names that could not be compared.
    pub failed: Vec<DiffFailure>,
    /// Tensors compared so far / in all.
    pub compared: usize,
    /// Tensors to compare.
    pub total: usize,
    /// Whether it was cancelled.
    pub cancelled: bool,
    /// MLX's peak active memory over the diff (reset when it began).
    pub peak_mlx_active_bytes: u64,
    /// Largest shard of A plus largest shard of B, in bytes (the bound the
    /// shard releases aim for).
    pub two_shards_bytes: u64,
    /// The whole bound on MLX's peak: the two shards and, for each side, the
    /// temporaries of decoding and comparing one band.
    pub bound_bytes: u64,
    /// Wall time.
    pub elapsed_secs: f64,
    /// The tensors that changed, together: the mean of their relative
    /// errors `‖a - b‖ / ‖a‖` weighted by their parameters (a 4-bit
    /// conversion's weights, not its unchanged norm vectors, make it).
    pub overall_rel_error: f64,
    /// That error in dB: `-20 log10(overall_rel_error)` (null in JSON when
    /// nothing changed).
    pub overall_snr_db: f64,
    /// Tensors in the overall figures: those that changed, without NaN or
    /// Inf on either side.
    pub overall_tensors: usize,
    /// Their parameters.
    pub overall_params: u64,
    /// Compared tensors whose values are equal on both sides, counted apart.
    pub unchanged_tensors: usize,
    /// Their parameters.
    pub unchanged_params: u64,
    /// Every finite compared tensor as one vector, changed or not:
    /// `sqrt(Σ‖a - b‖² / Σ‖a‖²)` (tensors with large values weigh most).
    pub energy_rel_error: f64,
    /// Compared tensors left out of the overall figures because a side has
    /// NaN or Inf (their own rows say which), in walk order.
    pub non_finite: Vec<String>,
    /// Up to ten compared tensors with the largest relative error, worst first.
    pub worst: Vec<String>,
}

impl DiffReport {
    /// The overall figures in words, saying what they leave out; `None`
    /// when nothing was compared. The CLI and the window print this.
    #[must_use]
    pub fn overall_text(&self) -> Option<String> {
        if self.common.is_empty() {
            return None;
        }
        let left_out = self.non_finite.len();
        let named = || {
            let mut names: Vec<&str> = self.non_finite.iter().take(3).map(String::as_str).collect();
            if left_out > 3 {
                names.push("…");
            }
            names.join(", ")
        };
        if self.overall_tensors == 0 && left_out > 0 && self.unchanged_tensors == 0 {
            return Some(format!(
                "no overall figure: all {left_out} compared tensors have NaN or Inf on a side ({})",
                named()
            ));
        }
        let unchanged = match self.unchanged_tensors {
            0 => String::new(),
            n => format!(
                "; {n} unchanged tensor{} ({} parameters) counted apart",
                if n == 1 { "" } else { "s" },
                crate::units::short_count(self.unchanged_params)
            ),
        };
        let mut text = if self.overall_tensors == 0 {
            format!("no tensor changed{unchanged}")
        } else {
            format!(
                "relative error {:.3e}, SNR {} over {} changed tensor{} ({} parameters): each one's ||a-b||/||a|| weighted by its parameters, both sides decoded to f32{unchanged}",
                self.overall_rel_error,
                snr_text(self.overall_snr_db),
                self.overall_tensors,
                if self.overall_tensors == 1 { "" } else { "s" },
                crate::units::short_count(self.overall_params)
            )
        };
        if left_out > 0 {
            let _ = write!(
                text,
                "; {left_out} with NaN or Inf on a side left out: {}",
                named()
            );
        }
        Some(text)
    }

    /// The changed tensors (finite, values differ) grouped by module kind
    /// (`q_proj`, `down_proj`, `embed_tokens`: the name's last word before
    /// `.weight`, layer and expert numbers dropped) and by how B stores
    /// them; the worst median first. With [`Self::typical_by_mode`] it says
    /// which kind of module a conversion hurt most.
    #[must_use]
    pub fn by_kind(&self) -> Vec<KindSummary> {
        let mut groups: std::collections::BTreeMap<(String, String), Vec<&Common>> =
            std::collections::BTreeMap::new();
        for c in self.changed_rows() {
            groups
                .entry((module_kind(&c.name).to_owned(), c.b_dtype.clone()))
                .or_default()
                .push(c);
        }
        let mut out: Vec<KindSummary> = groups
            .into_iter()
            .map(|((kind, b_dtype), rows)| {
                let worst = rows
                    .iter()
                    .max_by(|x, y| x.rel_error.total_cmp(&y.rel_error))
                    .map(|c| (c.name.clone(), c.rel_error))
                    .unwrap_or_default();
                KindSummary {
                    kind,
                    b_dtype,
                    tensors: rows.len(),
                    params: rows.iter().map(|c| c.params).sum(),
                    median_rel_error: median(rows.iter().map(|c| c.rel_error).collect()),
                    worst_rel_error: worst.1,
                    worst: worst.0,
                }
            })
            .collect();
        out.sort_by(|x, y| y.median_rel_error.total_cmp(&x.median_rel_error));
        out
    }

    /// The typical relative error of each way B stores tensors (its
    /// dtype and quantization mode): the median over the changed tensors
    /// stored that way. A tensor far above its mode's typical error is an
    /// outlier of the conversion, whatever the mode's usual error is.
    #[must_use]
    pub fn typical_by_mode(&self) -> Vec<(String, usize, f64)> {
        let mut modes: std::collections::BTreeMap<&str, Vec<f64>> =
            std::collections::BTreeMap::new();
        for c in self.changed_rows() {
            modes
                .entry(c.b_dtype.as_str())
                .or_default()
                .push(c.rel_error);
        }
        modes
            .into_iter()
            .map(|(mode, errors)| (mode.to_owned(), errors.len(), median(errors)))
            .collect()
    }

    /// Rows whose values differ, both sides finite.
    fn changed_rows(&self) -> impl Iterator<Item = &Common> {
        self.common
            .iter()
            .filter(|c| !c.nan && !c.inf && c.max_abs_diff != 0.0 && c.rel_error.is_finite())
    }

    /// Common tensors whose values differ at all.
    pub fn differing(&self) -> impl Iterator<Item = &Common> {
        self.common
            .iter()
            .filter(|c| c.max_abs_diff != 0.0 || c.nan || c.inf)
    }

    /// Compared tensors sorted by relative error, worst first (NaN first of all).
    #[must_use]
    pub fn by_error(&self) -> Vec<&Common> {
        let mut rows: Vec<&Common> = self.common.iter().collect();
        rows.sort_by(|x, y| {
            let key = |c: &Common| {
                if c.rel_error.is_nan() {
                    f64::INFINITY
                } else {
                    c.rel_error
                }
            };
            key(y).total_cmp(&key(x))
        });
        rows
    }

    fn finish(&mut self) {
        // A tensor with NaN or Inf on a side has no finite error: it is
        // counted apart and named, never folded in as "equal".
        let finite = |c: &&Common| !c.nan && !c.inf && c.diff_sq.is_finite() && c.a_sq.is_finite();
        let (diff_sq, a_sq) = self
            .common
            .iter()
            .filter(finite)
            .fold((0.0, 0.0), |(d, a), c| (d + c.diff_sq, a + c.a_sq));
        self.energy_rel_error = if a_sq > 0.0 {
            (diff_sq / a_sq).sqrt()
        } else {
            f64::NAN
        };
        let changed = |c: &&Common| finite(c) && c.max_abs_diff != 0.0;
        let unchanged = |c: &&Common| finite(c) && c.max_abs_diff == 0.0;
        self.overall_tensors = self.common.iter().filter(changed).count();
        self.overall_params = self.common.iter().filter(changed).map(|c| c.params).sum();
        self.unchanged_tensors = self.common.iter().filter(unchanged).count();
        self.unchanged_params = self.common.iter().filter(unchanged).map(|c| c.params).sum();
        self.non_finite = self
            .common
            .iter()
            .filter(|c| !finite(c))
            .map(|c| c.name.clone())
            .collect();
        if self.overall_params == 0 {
            self.overall_rel_error = if self.overall_tensors == 0 {
                0.0
            } else {
                f64::NAN
            };
            self.overall_snr_db = f64::INFINITY;
        } else {
            #[allow(clippy::cast_precision_loss)] // parameter counts as weights
            let weighted: f64 = self
                .common
                .iter()
                .filter(changed)
                .map(|c| c.params as f64 * c.rel_error)
                .sum::<f64>()
                / self.overall_params as f64;
            self.overall_rel_error = weighted;
            self.overall_snr_db = -20.0 * weighted.log10();
        }
        self.worst = self
            .by_error()
            .into_iter()
            .take(10)
            .map(|c| c.name.clone())
            .collect();
    }
}

/// The first name of tensor `name` when it is a tied name of it (a
/// PyTorch file's same view of one storage under a second name).
fn tied_first(checkpoint: &crate::checkpoint::Checkpoint, name: &str) -> Option<String> {
    let t = checkpoint.tensor(name)?;
    let at = checkpoint.torch_tensor_at(t.position())?;
    let first = at.tied_to.filter(|_| at.same_view)?;
    Some(checkpoint.tensors().get(first)?.name().to_owned())
}

/// Compares every tensor the two sides share, calling `progress` after each;
/// `cancel` is checked between tensors. The walker walks both sides in step
/// ([`InStep`]): everything cached on both is released first and MLX's cache
/// cleared, so the peak is the diff's own, and each side's shard goes once
/// no comparison left needs it.
pub fn diff<N: ShardLoader, M: ShardLoader>(
    a: &mut Weights<N>,
    b: &mut Weights<M>,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> DiffReport {
    let names_a = a.parameter_names();
    let names_b: BTreeSet<String> = b.parameter_names().into_iter().collect();
    let set_a: BTreeSet<&str> = names_a.iter().map(String::as_str).collect();
    let only_in_a: Vec<String> = set_a
        .iter()
        .filter(|n| !names_b.contains(**n))
        .map(|n| (*n).to_owned())
        .collect();
    let only_in_b: Vec<String> = names_b
        .iter()
        .filter(|n| !set_a.contains(n.as_str()))
        .cloned()
        .collect();
    let common: Vec<String> = names_a
        .iter()
        .filter(|n| names_b.contains(*n))
        .cloned()
        .collect();
    let mut tied = Vec::new();
    let (only_in_a, only_in_b) = {
        let both = |n: &str| set_a.contains(n) && names_b.contains(n);
        let mut untie = |names: Vec<String>, checkpoint: &crate::checkpoint::Checkpoint| {
            names
                .into_iter()
                .filter(|n| match tied_first(checkpoint, n) {
                    Some(first) if both(&first) => {
                        tied.push((n.clone(), first));
                        false
                    }
                    _ => true,
                })
                .collect::<Vec<_>>()
        };
        (
            untie(only_in_a, a.checkpoint()),
            untie(only_in_b, b.checkpoint()),
        )
    };
    let two_shards_bytes = largest_shard(a) + largest_shard(b);
    let mut report = DiffReport {
        only_in_a,
        only_in_b,
        tied,
        total: common.len(),
        two_shards_bytes,
        bound_bytes: two_shards_bytes + 2 * super::bands::band_bytes_bound(),
        overall_snr_db: f64::INFINITY,
        ..DiffReport::default()
    };

    let mut pair = InStep { a, b };
    let walked = Walker::new(common, Release::Shard, cancel)
        .with_parts()
        .run(&mut pair, &mut report, progress);
    pair.release_all();
    report.compared = walked.done;
    report.cancelled = walked.cancelled;
    report.peak_mlx_active_bytes = walked.peak_mlx_active_bytes;
    report.elapsed_secs = walked.elapsed.as_secs_f64();
    report.finish();
    report
}

/// The diff's visitor is its report: each tensor compared band by band and
/// filed as changed, common or failed.
impl<N: ShardLoader, M: ShardLoader> Visitor<InStep<'_, N, M>> for DiffReport {
    fn visit(
        &mut self,
        pair: &mut InStep<'_, N, M>,
        name: &str,
        _walking: &mut WalkProgress,
    ) -> Result<(), WeightsError> {
        match compare(pair.a, pair.b, name) {
            Ok(Outcome::Changed(changed)) => self.changed.push(changed),
            Ok(Outcome::Common(common)) => self.common.push(common),
            Err(error) => self.failed.push(DiffFailure {
                name: name.to_owned(),
                error: error.to_string(),
            }),
        }
        Ok(())
    }
}

/// A signal-to-noise ratio in words: "inf dB (equal)" when there is no
/// noise at all.
#[must_use]
pub fn snr_text(db: f64) -> String {
    if db.is_infinite() && db > 0.0 {
        "inf dB (equal)".to_owned()
    } else {
        format!("{db:.1} dB")
    }
}

/// Why one tensor could not be compared: a side could not be read, or MLX
/// failed on the pair.
#[derive(Debug, thiserror::Error)]
enum CompareError {
    #[error("A: {0}")]
    A(WeightsError),
    #[error("B: {0}")]
    B(WeightsError),
    #[error(transparent)]
    Mlx(#[from] mlx::MlxError),
}

enum Outcome {
    Changed(Changed),
    Common(Common),
}

fn compare<N: ShardLoader, M: ShardLoader>(
    a: &mut Weights<N>,
    b: &mut Weights<M>,
    name: &str,
) -> Result<Outcome, CompareError> {
    let ba = a.bands(name).map_err(CompareError::A)?;
    let bb = b.bands(name).map_err(CompareError::B)?;
    let a_dtype = described_dtype(a, name, ba.decoding.as_ref());
    let b_dtype = described_dtype(b, name, bb.decoding.as_ref());
    if ba.shape != bb.shape {
        return Ok(Outcome::Changed(Changed {
            name: name.to_owned(),
            a_dtype,
            a_shape: ba.shape.clone(),
            b_dtype,
            b_shape: bb.shape.clone(),
        }));
    }
    // Band by band: both sides decoded one band at a time, so only
    // band-sized temporaries exist beside the two shards.
    let step = band_rows(ba.cols, ba.align, bb.align);
    let mut sums = mlx::DiffSums::default();
    let mut r0 = 0;
    while r0 < ba.rows {
        let r1 = ba.rows.min(r0.saturating_add(step));
        let x = ba.band(r0, r1).map_err(|e| CompareError::A(e.into()))?;
        let y = bb.band(r0, r1).map_err(|e| CompareError::B(e.into()))?;
        sums.add(&x, &y)?;
        r0 = r1;
    }
    let d = sums.difference();
    Ok(Outcome::Common(Common {
        name: name.to_owned(),
        layer: layer_of(name),
        a_dtype,
        b_dtype,
        max_abs_diff: d.max_abs_diff,
        rel_error: d.rel_error,
        snr_db: d.snr_db,
        cosine: d.cosine,
        nan: d.nan,
        inf: d.inf,
        params: u64::try_from(i64::from(ba.rows) * i64::from(ba.cols)).unwrap_or(0),
        diff_sq: d.diff_sq,
        a_sq: d.a_sq,
    }))
}

/// The stored dtype of `name`, with how it is decoded.
pub(super) fn described_dtype<N: ShardLoader>(
    w: &Weights<N>,
    name: &str,
    decoding: Option<&Decoding>,
) -> String {
    let dtype = w.info(name).map_or("?", |i| i.dtype().name());
    match decoding {
        Some(Decoding::Quantized { params, .. }) => format!(
            "{dtype} {} {}-bit g{}",
            params.mode, params.bits, params.group_size
        ),
        Some(Decoding::Fp8 {
            block: Some([r, c]),
            block_inferred,
            ..
        }) => format!(
            "{dtype} block {r}x{c}{}",
            if *block_inferred { " (inferred)" } else { "" }
        ),
        // A GGUF block type: the table holds its bytes as U8.
        Some(Decoding::Ggml { kind, .. }) => kind.name.to_owned(),
        _ => dtype.to_owned(),
    }
}

fn largest_shard<N: ShardLoader>(weights: &Weights<N>) -> u64 {
    weights
        .checkpoint()
        .shards()
        .iter()
        .map(|s| s.data_bytes)
        .max()
        .unwrap_or(0)
}
