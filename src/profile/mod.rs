//! Memory sampling, whole-model walks, traces and findings, as plain data
//! (no egui): the app draws them, the CLI prints them.
//!
//! One clock for everything: samples from the `memory-sampler` thread, and
//! events (materialize, release, walk steps) each recorded with memory right
//! after it and with what its shard holds by the Weights core's bookkeeping.

mod findings;
mod prefetch;
pub mod record;
mod sampler;
mod timeline;
mod trace;
mod walk;

pub use findings::{Finding, FindingKind, FitReport, findings, fit_report};
pub use prefetch::Prefetcher;
pub use sampler::{
    DEFAULT_INTERVAL, MachineMemory, MemorySample, ProcessMemory, Sampler, Series,
    process_rss_bytes, reset_peak_rss,
};
pub use timeline::{TIMELINE_EVENTS, TIMELINE_SAMPLES, Timeline};
pub use trace::{
    ExpectedPeaks, JobInfo, Mark, MarkKind, Residency, ResidencyChange, ResidentShard,
    ResidentTensor, TRACE_VERSION, Trace, TraceError, TraceEvent, TraceSample, residency_steps,
    resident_at, secs_since,
};
pub use walk::{
    PlannedShard, Policy, Q4_GROUP_SIZE, Recorded, Transform, WalkOutcome, WalkPlan, walk,
};
