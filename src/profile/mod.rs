//! Memory sampling, whole-model walks and traces, as plain data (no egui).
//!
//! So far: the sampler thread and its bounded series, which the app's memory
//! strip draws. The walk engine, expected-vs-actual budgets and trace export
//! come with the profiler issue.

mod sampler;

pub use sampler::{MemorySample, Sampler, Series, process_rss_bytes};
