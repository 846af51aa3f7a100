//! The egui user interface. Panels draw into an `egui::Ui` and never depend on
//! eframe or rfd, so they can be driven headlessly in tests; [`shell`] is the
//! thin eframe edge. Every MLX array lives on the MLX worker thread: the UI
//! sends commands and draws the summaries that come back.
//!
//! `weightscope_app.rs` holds the app's state (`WeightscopeApp`) and its
//! frame; each panel is a module of its own.

mod axes;
mod background;
mod check;
pub mod commands;
mod diff;
mod heatmap;
#[cfg(any(test, feature = "test-hooks"))]
mod hooks;
mod inspector;
mod job_view;
mod keymap;
mod memory_strip;
mod palette;
mod profiler;
mod record;
pub mod settings;
mod shards;
pub mod shell;
mod status_bar;
mod tensors;
mod weightscope_app;
mod widgets;

pub use commands::{AppCommand, CommandSender};
#[cfg(any(test, feature = "test-hooks"))]
pub use hooks::Hooks;
pub use shards::ShardState;
use weightscope_app::SampleWakes;
pub use weightscope_app::{Dialog, Tab, WeightscopeApp};
