//! weightscope: a checkpoint browser and memory profiler for MLX.
//!
//! The layers, each depending only on those listed before it (and on
//! `units`, `par` and `files`, at the bottom):
//! - [`checkpoint`]: safetensors and GGUF headers, indexes, validation, byte
//!   accounting (pure Rust; never reads tensor bytes unless asked; no
//!   network: remote bytes come through its `ByteSource` trait);
//! - `remote`: Hub repos and URLs, read by range requests;
//! - `memory`: one vocabulary for memory at a moment (samples, events,
//!   release policies), plain data, below everything that records memory;
//! - `mlx`: the only code that touches MLX (lazy loads, evaluation, memory
//!   counters read into `memory`'s figures);
//! - `weights`: the Weights core, model directory to lazy MLX arrays;
//! - `profile`: memory sampling, walks and traces, as plain data;
//! - `worker`: the MLX worker thread, which owns every array and runs walks;
//! - `app`: the egui user interface;
//! - `cli`: command-line parsing and output formats;
//! - [`units`]: human-readable numbers, shared by the app and the CLI;
//! - [`par`]: the one way work runs on several cores (named scoped threads);
//! - [`files`]: bounded reads of the files a user names, and writes that never
//!   land on a checkpoint or leave half a file (every layer uses it).
//!
//! Cargo features choose how far up the layers build: none gives the format
//! layer alone (`checkpoint`, `units`, `par`, `files`); `remote` adds the
//! network; `mlx` (with `remote`) adds `mlx`, `memory`, `weights`,
//! `profile` and `worker`; `app` (the default) adds `app` and `cli`.
//!
//! `docs/ARCHITECTURE.md` describes the data flow and the threads.

// The format layer and what it stands on: always built, never MLX, egui
// or the network (`cargo test --no-default-features`).
pub mod checkpoint;
pub mod environment;
pub mod files;
pub mod finding;
pub mod par;
pub mod units;

#[cfg(feature = "remote")]
pub mod remote;

#[cfg(feature = "mlx")]
pub mod memory;
#[cfg(feature = "mlx")]
pub mod mlx;
#[cfg(feature = "mlx")]
pub mod profile;
#[cfg(feature = "mlx")]
pub mod weights;
#[cfg(feature = "mlx")]
pub mod worker;

#[cfg(feature = "app")]
pub mod app;
#[cfg(feature = "app")]
pub mod cli;
