//! weightscope: a checkpoint browser and memory profiler for MLX.
//!
//! The layers, each depending only on those listed before it:
//! - [`checkpoint`]: safetensors headers and indexes, validation, byte accounting
//!   (pure Rust; never reads tensor bytes);
//! - [`mlx`]: the only code that touches MLX (lazy loads, evaluation, memory counters);
//! - [`memory`]: one vocabulary for memory at a moment (samples, events,
//!   release policies), below everything that records memory;
//! - [`weights`]: the Weights core, model directory to lazy MLX arrays;
//! - [`profile`]: memory sampling, walks and traces, as plain data;
//! - [`worker`]: the MLX worker thread, which owns every array and runs walks;
//! - [`app`]: the egui user interface;
//! - [`cli`]: command-line parsing and output formats;
//! - [`units`]: human-readable numbers, shared by the app and the CLI;
//! - [`par`]: the one way work runs on several cores (named scoped threads);
//! - [`files`]: bounded reads of the files a user names, and writes that never
//!   land on a checkpoint or leave half a file (every layer uses it).
//!
//! `docs/ARCHITECTURE.md` describes the data flow and the threads.

pub mod app;
pub mod checkpoint;
pub mod cli;
pub mod files;
pub mod memory;
pub mod mlx;
pub mod par;
pub mod profile;
pub mod remote;
pub mod units;
pub mod weights;
pub mod worker;
