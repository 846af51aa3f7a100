//! What a trace says: the walk's findings, a recording's summary and its
//! findings, the source lines that grew memory, who held it at the peak,
//! several hosts' journals merged, and the timeline the window draws. Reads
//! traces (`profile::trace`); never samples, never writes.

pub mod compare;
pub mod findings;
pub mod held;
pub mod hosts;
pub mod job_findings;
pub mod journals;
pub mod recording;
pub mod stacks;
mod summarize;
pub mod timeline;
