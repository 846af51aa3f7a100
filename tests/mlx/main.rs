//! Real MLX in this process: the Weights core, previews, walks, diffs,
//! checks, the worker and checkpoints written by MLX and mlx-lm. Every test
//! that touches MLX holds `common::mlx_memory_lock()`: its counters, limits
//! and the process's RSS are shared by the whole binary.
//!
//! One test binary per group (each links MLX and egui): `cargo test --test
//! mlx <module>::` runs one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod check;
mod faults;
mod gguf_files;
mod mlx_lm_writer;
mod mlx_real;
mod profile_walk;
mod pytorch_files;
mod real_checkpoints;
mod remote;
mod tensor_preview;
mod views_diff;
mod weights_core;
mod worker;
