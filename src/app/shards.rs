//! The shards panel: file, size, tensors, state, release actions.

use crate::units::{human_bytes, printable};
use crate::worker::Command;

use super::{ShardState, WeightscopeApp};

impl WeightscopeApp {
    pub(super) fn shards_ui(&mut self, ui: &mut egui::Ui) {
        let Some(checkpoint) = self.checkpoint.clone() else {
            return;
        };
        ui.heading("Shards");
        ui.horizontal(|ui| {
            if ui.button("Release all").clicked() {
                self.send(Command::ReleaseAll);
            }
            if ui.button("Clear MLX cache").clicked() {
                self.send(Command::ClearCache);
            }
        });
        ui.separator();
        egui::ScrollArea::vertical()
            .id_salt("shards-scroll")
            .show(ui, |ui| {
                for shard in checkpoint.shards() {
                    let state = self
                        .shard_states
                        .get(&shard.file)
                        .copied()
                        .unwrap_or(ShardState::NotLoaded);
                    ui.group(|ui| {
                        ui.label(egui::RichText::new(&shard.file).monospace());
                        ui.label(format!(
                            "{}, {} tensors",
                            human_bytes(shard.file_bytes),
                            shard.tensors.len()
                        ));
                        ui.horizontal(|ui| {
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
                                self.send(Command::ReleaseShard(shard.file.clone()));
                            }
                        });
                    });
                }
                for problem in checkpoint.problems() {
                    ui.colored_label(ui.visuals().error_fg_color, printable(&problem.to_string()));
                }
            });
    }
}
