//! No MLX in this process: checkpoint parsing, the layering rules, and the
//! recorder and reliability tests, which run real child processes.
//!
//! One test binary per group (each links MLX and egui): `cargo test --test
//! plain <module>::` runs one file's tests.

#[path = "../common/mod.rs"]
mod common;

mod attack;
mod bounded;
mod checkpoint_open;
mod edges;
mod export;
mod held;
mod hosts;
mod layers;
mod record;
mod reliability;
mod shown;
mod viewers;
mod writer;
