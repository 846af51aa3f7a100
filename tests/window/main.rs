//! The window: `egui_kittest` on the real worker and real files (panels,
//! image snapshots, hostile checkpoints opened in one window).
//!
//! One test binary per group (each links MLX and egui): `cargo test --test
//! window <module>::` runs one file's tests.

#[path = "../common/mod.rs"]
mod common;

/// The benchmarks' DeepSeek-V3-shaped layout (163 sparse shards, 90k
/// tensors), for snapshots of a large checkpoint.
#[path = "../../benches/common/mod.rs"]
mod layout;

mod app_ui;
mod hostile;
mod navigation;
mod recording;
mod recordings_list;
mod snapshots;
