//! The walk: materialize every tensor of a checkpoint in shard order, as a
//! streaming conversion job does, under a release policy, recording memory
//! after every step. This is the experiment that shows why a whole-model
//! transform ran out of memory.
//!
//! A walk's job model: each source tensor is read (and optionally cast to f16
//! or 4-bit quantized); the outputs of one source shard are kept until the
//! walk leaves that shard (a job writes one output shard per input shard),
//! except under `retain`, which keeps everything.

use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::checkpoint::{Checkpoint, Dtype, ShardId, TensorRef};
use crate::mlx::{self, Array};
use crate::weights::{
    Release, Released, ShardLoader, Visitor, WalkProgress, Walker, Weights, WeightsError,
};

use crate::memory::{ExpectedPeaks, Mark, MarkKind, Policy, Sample};

/// What the walk does to each tensor after reading it, mimicking real jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transform {
    /// Read only.
    None,
    /// Cast f32 and bf16 tensors to f16 (a conversion job).
    F16,
    /// MLX 4-bit affine quantization (group size 64) of 2-D float tensors
    /// whose last dimension is a multiple of 64 (a quantization job).
    Q4,
}

/// Group size of the `q4` transform.
pub const Q4_GROUP_SIZE: u64 = 64;

impl Transform {
    /// Every transform, in the order they are shown.
    pub const ALL: [Self; 3] = [Self::None, Self::F16, Self::Q4];

    /// The command-line name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::F16 => "f16",
            Self::Q4 => "q4",
        }
    }

    /// The transform of a command-line name.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Bytes this transform's output of `tensor` takes (0: it passes as is).
    #[must_use]
    pub fn output_bytes(self, tensor: TensorRef<'_>) -> u64 {
        let source_float = matches!(tensor.dtype(), Dtype::F32 | Dtype::BF16 | Dtype::F16);
        match self {
            Self::None => 0,
            Self::F16 => {
                if source_float && tensor.dtype() != Dtype::F16 {
                    tensor.elements() * 2
                } else {
                    0
                }
            }
            Self::Q4 => {
                if self.quantizes(tensor) {
                    let elements = tensor.elements();
                    let scale_bytes = tensor.dtype().bits() / 8;
                    // Packed 4-bit words, plus one scale and one bias per group.
                    elements / 2 + 2 * (elements / Q4_GROUP_SIZE) * scale_bytes
                } else {
                    0
                }
            }
        }
    }

    fn quantizes(self, tensor: TensorRef<'_>) -> bool {
        self == Self::Q4
            && matches!(tensor.dtype(), Dtype::F32 | Dtype::BF16 | Dtype::F16)
            && tensor.shape().len() == 2
            && tensor
                .shape()
                .last()
                .is_some_and(|&d| d > 0 && d % Q4_GROUP_SIZE == 0)
    }

    /// Applies the transform to `array` (the walk evaluates the result).
    fn apply(self, tensor: TensorRef<'_>, array: &Array) -> Result<Vec<Array>, mlx::MlxError> {
        match self {
            Self::None => Ok(Vec::new()),
            Self::F16 => {
                if self.output_bytes(tensor) == 0 {
                    return Ok(Vec::new());
                }
                Ok(vec![mlx::cast(array, mlx::Dtype::Float16)?])
            }
            Self::Q4 => {
                if !self.quantizes(tensor) {
                    return Ok(Vec::new());
                }
                let group = i32::try_from(Q4_GROUP_SIZE).unwrap_or(64);
                let (w, scales, biases) = mlx::quantize(array, group, 4)?;
                Ok(vec![w, scales, biases])
            }
        }
    }
}

/// One shard as the walk will read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedShard {
    /// Shard file.
    pub file: String,
    /// Its position among the checkpoint's shards.
    pub index: ShardId,
    /// Canonical names read from it, in data order.
    pub names: Vec<String>,
    /// Bytes read from it.
    pub source_bytes: u64,
    /// Bytes of the transform's outputs for it.
    pub output_bytes: u64,
}

/// What a walk will read, from the headers alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkPlan {
    /// The transform the plan was made for.
    pub transform: Transform,
    /// Shards in walk order (only those with tensors to read).
    pub shards: Vec<PlannedShard>,
}

impl WalkPlan {
    /// The plan for walking `weights` (through its view, if any) with `transform`.
    #[must_use]
    pub fn new<N: ShardLoader>(weights: &Weights<N>, transform: Transform) -> Self {
        let mut shards: Vec<PlannedShard> = Vec::new();
        for name in weights.walk_order() {
            let Some(info) = weights.info(&name) else {
                continue;
            };
            if shards.last().is_none_or(|s| s.index != info.shard()) {
                shards.push(PlannedShard {
                    file: weights.checkpoint().shard(info.shard()).file.clone(),
                    index: info.shard(),
                    names: Vec::new(),
                    source_bytes: 0,
                    output_bytes: 0,
                });
            }
            if let Some(shard) = shards.last_mut() {
                shard.source_bytes += info.bytes();
                shard.output_bytes += transform.output_bytes(info);
                shard.names.push(name);
            }
        }
        Self { transform, shards }
    }

    /// The plan for walking `checkpoint` as stored (no view), from the
    /// headers alone: what the app predicts before any walk runs.
    #[must_use]
    pub fn from_checkpoint(checkpoint: &Checkpoint, transform: Transform) -> Self {
        let tensors = checkpoint.tensors();
        let shards = checkpoint
            .shards()
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.tensors.is_empty())
            .map(|(index, shard)| PlannedShard {
                file: shard.file.clone(),
                index: ShardId(index),
                names: tensors
                    .iter_range(shard.tensors.clone())
                    .map(|t| t.name().to_owned())
                    .collect(),
                source_bytes: tensors
                    .iter_range(shard.tensors.clone())
                    .map(TensorRef::bytes)
                    .sum(),
                output_bytes: tensors
                    .iter_range(shard.tensors.clone())
                    .map(|t| transform.output_bytes(t))
                    .sum(),
            })
            .collect();
        Self { transform, shards }
    }

    /// Tensors the walk reads.
    #[must_use]
    pub fn tensor_count(&self) -> usize {
        self.shards.iter().map(|s| s.names.len()).sum()
    }

    /// Bytes the walk reads.
    #[must_use]
    pub fn source_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.source_bytes).sum()
    }

    /// Bytes of all the transform's outputs.
    #[must_use]
    pub fn output_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.output_bytes).sum()
    }

    /// The shard with the most bytes to read.
    #[must_use]
    pub fn largest_shard(&self) -> Option<&PlannedShard> {
        self.shards.iter().max_by_key(|s| s.source_bytes)
    }

    /// The expected peak of MLX active memory for each policy:
    /// - retain: every source tensor plus every output;
    /// - release-tensor: every source tensor (the maps keep them) plus the
    ///   outputs of the largest-output shard;
    /// - release-shard: the largest (shard + its outputs).
    #[must_use]
    pub fn expected(&self) -> ExpectedPeaks {
        let largest_outputs = self
            .shards
            .iter()
            .map(|s| s.output_bytes)
            .max()
            .unwrap_or(0);
        ExpectedPeaks {
            retain: self.source_bytes() + self.output_bytes(),
            release_tensor: self.source_bytes() + largest_outputs,
            release_shard: self
                .shards
                .iter()
                .map(|s| s.source_bytes + s.output_bytes)
                .max()
                .unwrap_or(0),
        }
    }
}

/// One recorded moment of a walk: what happened and memory right after.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// What happened.
    pub mark: Mark,
    /// Memory right after (its `at` is the event's time).
    pub memory: Sample<Instant>,
    /// Tensors done and tensors in all.
    pub progress: (usize, usize),
}

/// The tensor whose step stopped a walk, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{tensor}: {error}")]
pub struct WalkStopped {
    /// The tensor.
    pub tensor: String,
    /// Why (shared: outcomes are cloned into events and traces).
    pub error: std::sync::Arc<WeightsError>,
}

impl PartialEq for WalkStopped {
    fn eq(&self, other: &Self) -> bool {
        self.tensor == other.tensor && self.error.to_string() == other.error.to_string()
    }
}

/// How a walk ended.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkOutcome {
    /// The policy walked.
    pub policy: Policy,
    /// The transform applied.
    pub transform: Transform,
    /// Tensors materialized.
    pub steps_done: usize,
    /// Tensors planned.
    pub steps_total: usize,
    /// Whether it was cancelled.
    pub cancelled: bool,
    /// The error that stopped it, if one did.
    pub error: Option<WalkStopped>,
    /// MLX's own peak counter over the walk (reset when it began).
    pub peak_mlx_active_bytes: u64,
    /// The process's peak RSS over the walk (`VmHWM`, reset when it began,
    /// where the OS allows; else the highest sample).
    pub peak_rss_bytes: u64,
    /// The headers' prediction for every policy.
    pub expected: ExpectedPeaks,
    /// Bytes read.
    pub source_bytes: u64,
    /// The largest shard's bytes to read.
    pub largest_shard_bytes: u64,
    /// Wall time.
    pub elapsed_secs: f64,
    /// Of that, time spent waiting for the shards' bytes to be read from
    /// disk before asking MLX for them: near `elapsed_secs`, the walk went
    /// as fast as the files could be read.
    pub read_wait_secs: f64,
}

impl WalkOutcome {
    /// The prediction for the policy walked.
    #[must_use]
    pub fn expected_peak_bytes(&self) -> u64 {
        self.policy.expected(&self.expected)
    }
}

/// Walks every tensor of `weights` in shard order under `policy`, calling
/// `emit` after each event: the walker ([`crate::weights::Walker`]) with
/// the prefetcher, releasing as the policy says, and this visitor, which
/// transforms each tensor and records a mark after each step. Everything
/// cached is released and MLX's cache cleared first, so the walk starts
/// from nothing; `cancel` is checked before each tensor. MLX failures stop
/// the walk and are reported in the outcome.
pub fn walk<N: ShardLoader>(
    weights: &mut Weights<N>,
    policy: Policy,
    transform: Transform,
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(Recorded),
) -> WalkOutcome {
    let plan = WalkPlan::new(weights, transform);
    let expected = plan.expected();
    let release = match policy {
        Policy::Retain => Release::Nothing,
        Policy::ReleaseTensor => Release::Tensor,
        Policy::ReleaseShard => Release::Shard,
    };
    let names: Vec<String> = plan.shards.iter().flat_map(|s| s.names.clone()).collect();
    let mut visitor = ProfileVisitor {
        policy,
        transform,
        shards: plan.shards.len(),
        expected: policy.expected(&expected),
        device: mlx::default_device().map_or_else(|_| "unknown".to_owned(), |d| d.name()),
        kept: Vec::new(),
        emit,
    };
    // A remote checkpoint's tensors come by range requests: no file to
    // read ahead into the page cache.
    let fresh = Walker::new(names, release, cancel);
    let planned = if weights.checkpoint().remote().is_none() {
        fresh.with_prefetch()
    } else {
        fresh
    };
    let walked = planned.run(weights, &mut visitor, &mut |_| {});
    let error = walked.stopped.map(|(tensor, error)| WalkStopped {
        tensor,
        error: std::sync::Arc::new(error),
    });
    drop(visitor.kept.drain(..));
    let (done, total) = (walked.done, walked.total);
    let end_detail = match (&error, walked.cancelled) {
        (Some(e), _) => format!("stopped by an error after {done} of {total}: {e}"),
        (None, true) => format!("cancelled after {done} of {total}"),
        (None, false) => format!("{done} tensors"),
    };
    (visitor.emit)(Recorded {
        mark: Mark::new(MarkKind::WalkEnd, policy.as_str())
            .bytes(walked.peak_mlx_active_bytes)
            .detail(end_detail),
        memory: crate::mlx::sample_now(),
        progress: (done, total),
    });
    WalkOutcome {
        policy,
        transform,
        steps_done: done,
        steps_total: total,
        cancelled: walked.cancelled,
        error,
        peak_mlx_active_bytes: walked.peak_mlx_active_bytes,
        peak_rss_bytes: walked.peak_rss_bytes,
        expected,
        source_bytes: plan.source_bytes(),
        largest_shard_bytes: plan.largest_shard().map_or(0, |s| s.source_bytes),
        elapsed_secs: walked.elapsed.as_secs_f64(),
        read_wait_secs: walked.read_wait.as_secs_f64(),
    }
}

/// The walk's visitor: reads and transforms each tensor, keeps the outputs
/// of the shard at hand (all of them under `retain`), records a mark after
/// each step and release.
struct ProfileVisitor<'e> {
    policy: Policy,
    transform: Transform,
    shards: usize,
    expected: u64,
    device: String,
    kept: Vec<Array>,
    emit: &'e mut dyn FnMut(Recorded),
}

impl ProfileVisitor<'_> {
    fn record(&mut self, mark: Mark, walking: &mut WalkProgress, done: usize) {
        let memory = walking.sample();
        (self.emit)(Recorded {
            mark,
            memory,
            progress: (done, walking.total()),
        });
    }

    fn failed(&mut self, name: &str, err: &WeightsError, walking: &mut WalkProgress) {
        let mark = Mark::new(MarkKind::Error, name).detail(err.to_string());
        self.record(mark, walking, walking.done());
    }
}

impl<N: ShardLoader> Visitor<Weights<N>> for ProfileVisitor<'_> {
    fn begin(&mut self, _weights: &mut Weights<N>, walking: &mut WalkProgress) {
        let mark = Mark::new(MarkKind::WalkStart, self.policy.as_str())
            .bytes(self.expected)
            .detail(format!(
                "transform {}, {} in {}; everything released and MLX's cache cleared first",
                self.transform.as_str(),
                crate::units::count_of(walking.total(), "tensor", "tensors"),
                crate::units::count_of(self.shards, "shard", "shards")
            ));
        self.record(mark, walking, 0);
    }

    fn ready(
        &mut self,
        weights: &mut Weights<N>,
        name: &str,
        walking: &mut WalkProgress,
    ) -> Result<(), WeightsError> {
        // A tensor past MLX's memory limit is refused before the reader
        // streams its bytes from disk (100 GB of them, maybe).
        weights
            .check_room(name, 0)
            .inspect_err(|err| self.failed(name, err, walking))
    }

    fn visit(
        &mut self,
        weights: &mut Weights<N>,
        name: &str,
        walking: &mut WalkProgress,
    ) -> Result<(), WeightsError> {
        let (bytes, output_bytes, shard) = read_one(weights, name, self.transform, &mut self.kept)
            .inspect_err(|err| self.failed(name, err, walking))?;
        let file = weights.checkpoint().shard(shard).file.clone();
        let mut detail = format!("{}, shard {file}", self.device);
        if output_bytes > 0 {
            let _ = write!(
                detail,
                ", {} output {}",
                self.transform.as_str(),
                crate::units::human_bytes(output_bytes)
            );
        }
        let resident = weights.resident_bytes(shard);
        let mark = Mark::new(MarkKind::WalkStep, name)
            .bytes(bytes)
            .detail(detail)
            .resident(file, resident);
        self.record(mark, walking, walking.done() + 1);
        Ok(())
    }

    fn released(
        &mut self,
        weights: &mut Weights<N>,
        what: Released<'_>,
        walking: &mut WalkProgress,
    ) {
        let done = walking.done();
        match what {
            Released::Tensor(name) => {
                let Some(info) = weights.info(name) else {
                    return;
                };
                let (bytes, shard) = (info.bytes(), info.shard());
                let file = weights.checkpoint().shard(shard).file.clone();
                let resident = weights.resident_bytes(shard);
                let mark = Mark::new(MarkKind::Release, name)
                    .bytes(bytes)
                    .resident(file, resident);
                self.record(mark, walking, done);
            }
            Released::Shard { shard, freed, .. } => {
                let file = weights.checkpoint().shard(shard).file.clone();
                let mark = Mark::new(MarkKind::ReleaseShard, file.as_str())
                    .bytes(freed)
                    .resident(file, 0);
                self.record(mark, walking, done);
            }
        }
    }

    fn leaving(&mut self, _weights: &mut Weights<N>, _shard: ShardId) {
        // The shard's outputs are written; only `retain` keeps them.
        if self.policy != Policy::Retain {
            self.kept.clear();
        }
    }
}

/// Materializes `name`, applies the transform and evaluates its outputs
/// (kept in `kept`). Returns the source's and the outputs' bytes, and the
/// source's shard.
fn read_one<N: ShardLoader>(
    weights: &mut Weights<N>,
    name: &str,
    transform: Transform,
    kept: &mut Vec<Array>,
) -> Result<(u64, u64, ShardId), WeightsError> {
    let array = weights.materialize(name)?;
    let info = weights
        .info(name)
        .ok_or_else(|| WeightsError::NoTensor(name.to_owned()))?;
    let outputs = transform.apply(info, &array)?;
    if !outputs.is_empty() {
        mlx::evaluate_all(&outputs)?;
    }
    let output_bytes = transform.output_bytes(info);
    kept.extend(outputs);
    Ok((info.bytes(), output_bytes, info.shard()))
}
