//! Memory sampling, whole-model walks, traces and findings, as plain data
//! (no egui): the app draws them, the CLI prints them.
//!
//! One clock for everything: samples from the `memory-sampler` thread, and
//! events (materialize, release, walk steps) each recorded with memory right
//! after it and with what its shard holds by the Weights core's bookkeeping.

mod findings;
pub mod held;
pub mod hosts;
mod job_end;
pub mod record;
mod sampler;
pub mod stacks;
mod timeline;
mod trace;
mod walk;

pub use findings::{Finding, FindingKind, FitReport, findings, fit_report};
pub use sampler::{DEFAULT_INTERVAL, Sampler, Series};
pub use timeline::{TIMELINE_EVENTS, TIMELINE_SAMPLES, Timeline};
pub use trace::{
    CsvError, JobInfo, Journal, Origin, Residency, ResidencyChange, ResidentShard, ResidentTensor,
    TRACE_VERSION, Trace, TraceError, TraceEvent, residency_steps, resident_at,
};
pub use walk::{
    PlannedShard, Q4_GROUP_SIZE, Recorded, Transform, WalkOutcome, WalkPlan, WalkStopped, walk,
};
