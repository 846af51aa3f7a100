//! Memory sampling, whole-model walks, traces and findings, as plain data
//! (no egui): the app draws them, the CLI prints them. Five rooms, as
//! memray has them: `capture` (recording a job, sampling a walk), `trace`
//! (the file format: one writer, one reader), `analysis` (what a trace
//! says), `export` (the formats other viewers open), and the checkpoint
//! walk (`walk.rs`).
//!
//! One clock for everything: samples from the `memory-sampler` thread, and
//! events (materialize, release, walk steps) each recorded with memory right
//! after it and with what its shard holds by the Weights core's bookkeeping.

pub mod analysis;
pub mod capture;
pub mod export;
pub mod trace;
mod walk;

pub use analysis::findings::{Finding, FindingKind, FitReport, findings, fit_report};
pub use analysis::timeline::{TIMELINE_EVENTS, TIMELINE_SAMPLES, Timeline};
pub use capture::sampler::{DEFAULT_INTERVAL, Sampler, Series};
pub use trace::{
    CsvError, JobInfo, Journal, JournalEnded, Origin, Residency, ResidencyChange, ResidentShard,
    ResidentTensor, TRACE_VERSION, Trace, TraceError, TraceEvent, residency_steps, resident_at,
};
pub use walk::{
    PlannedShard, Q4_GROUP_SIZE, Recorded, Transform, WalkOutcome, WalkPlan, WalkStopped, walk,
};
