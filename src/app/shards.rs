//! The shards panel: file, size, tensors, state, release actions.

use std::collections::HashMap;

use crate::checkpoint::Checkpoint;
use crate::units::{Shown, human_bytes};

use super::commands::{AppCommand, CommandSender};
use crate::checkpoint::ShardId;

/// What a shard holds right now, as the worker reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardState {
    /// Opened lazily; nothing read yet.
    NotLoaded,
    /// Tensors were materialized from it: the worker's count of the bytes
    /// on disk they occupy (a tensor counted once however often clicked).
    Materialized(u64),
    /// Its map was released; it reopens on the next click.
    Released,
}

/// The shards panel. Its states have one source: the worker's marks (each
/// materialization and walk step carries the shard's resident bytes).
#[derive(Debug, Default)]
pub(super) struct ShardsPanel {
    states: HashMap<String, ShardState>,
}

impl ShardsPanel {
    /// Every shard of a newly opened checkpoint, nothing read yet.
    pub(super) fn opened(checkpoint: &Checkpoint) -> Self {
        Self {
            states: checkpoint
                .shards()
                .iter()
                .map(|s| (s.file.clone(), ShardState::NotLoaded))
                .collect(),
        }
    }

    /// The worker's figure for `file`: `bytes` resident (0: released).
    pub(super) fn resident(&mut self, file: &str, bytes: u64) {
        let state = if bytes > 0 {
            ShardState::Materialized(bytes)
        } else {
            ShardState::Released
        };
        self.states.insert(file.to_owned(), state);
    }

    /// Every shard was released.
    pub(super) fn released_all(&mut self) {
        for state in self.states.values_mut() {
            *state = ShardState::Released;
        }
    }

    /// The state of `file` (not loaded when unknown).
    pub(super) fn state(&self, file: &str) -> ShardState {
        self.states
            .get(file)
            .copied()
            .unwrap_or(ShardState::NotLoaded)
    }

    /// Draws each shard of `checkpoint` with its state and release buttons.
    pub(super) fn ui(&self, ui: &mut egui::Ui, checkpoint: &Checkpoint, commands: &CommandSender) {
        ui.heading("Shards");
        ui.horizontal(|ui| {
            if ui.button("Release all").clicked() {
                commands.send(AppCommand::ReleaseAll);
            }
            if ui.button("Clear MLX cache").clicked() {
                commands.send(AppCommand::ClearCache);
            }
        });
        ui.separator();
        egui::ScrollArea::vertical()
            .id_salt("shards-scroll")
            .show(ui, |ui| {
                for (i, shard) in checkpoint.shards().iter().enumerate() {
                    let state = self.state(&shard.file);
                    ui.group(|ui| {
                        ui.label(egui::RichText::new(&shard.file).monospace());
                        ui.label(format!(
                            "{}, {} tensors",
                            human_bytes(shard.file_bytes),
                            shard.tensors.len()
                        ));
                        ui.horizontal_wrapped(|ui| {
                            let text = match state {
                                ShardState::NotLoaded => "not loaded".to_owned(),
                                ShardState::Materialized(bytes) => {
                                    format!("materialized {}", human_bytes(bytes))
                                }
                                ShardState::Released => "released".to_owned(),
                            };
                            ui.label(text);
                            let release = ui.add_enabled(
                                matches!(state, ShardState::Materialized(_)),
                                egui::Button::new("Release shard"),
                            );
                            if release.clicked() {
                                commands.send(AppCommand::ReleaseShard(ShardId(i)));
                            }
                        });
                        if let Some(torch) = checkpoint.torch_shard(ShardId(i)) {
                            torch_ui(ui, torch);
                        }
                    });
                }
                for file in checkpoint.not_read() {
                    ui.label(format!(
                        "{} is not read: the safetensors files are (as transformers reads them)",
                        Shown::new(file)
                    ));
                }
                for problem in checkpoint.problems() {
                    ui.colored_label(
                        ui.visuals().error_fg_color,
                        Shown::new(&problem.to_string()),
                    );
                }
            });
    }
}

/// A PyTorch file's format and its pickle's verdict, with each global it
/// imports that the reader does not understand (never called).
fn torch_ui(ui: &mut egui::Ui, torch: &crate::checkpoint::torch_checkpoint::TorchShard) {
    use crate::checkpoint::pytorch::Safety;
    let colour = |ui: &egui::Ui, safety: Safety| match safety {
        Safety::Innocuous => ui.visuals().text_color(),
        Safety::Suspicious => ui.visuals().warn_fg_color,
        Safety::Dangerous => ui.visuals().error_fg_color,
    };
    let verdict = torch.verdict();
    ui.colored_label(
        colour(ui, verdict),
        format!(
            "PyTorch ({}), pickle {}: read without running it",
            torch.format.name(),
            verdict.name()
        ),
    );
    for g in torch
        .globals
        .iter()
        .filter(|g| g.safety != Safety::Innocuous)
    {
        ui.colored_label(
            colour(ui, g.safety),
            format!(
                "imports {} ({}): never called here; torch.load would call it",
                Shown::new(&g.global),
                g.safety.name()
            ),
        );
    }
}
