//! No MLX in this process: checkpoint parsing, the layering rules, and the
//! recorder and reliability tests, which run real child processes.
//!
//! One test binary per group (each links MLX and egui): `cargo test --test
//! plain <module>::` runs one file's tests.

#[path = "../common/mod.rs"]
mod common;

/// The benchmarks' DeepSeek-V3-shaped layout (163 sparse shards, 90k
/// tensors), for the text a large checkpoint prints.
#[path = "../../benches/common/mod.rs"]
mod layout;

mod attack;
mod bounded;
mod checkpoint_open;
mod edges;
mod export;
mod held;
mod hosts;
mod layers;
mod outside;
mod real_model;
mod record;
mod reliability;
mod shown;
mod text;
mod viewers;
mod writer;
