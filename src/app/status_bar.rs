//! The status bar: the MLX device and its memory figures, the check badge,
//! and the open checkpoint's totals and parameters.

use crate::checkpoint::{Checkpoint, Summary};
use crate::mlx::{DeviceInfo, MemoryStats};
use crate::units::{human_bytes, short_count};

use super::commands::{AppCommand, CommandSender};

/// What the status bar shows that other parts own.
pub(super) struct StatusInputs<'a> {
    /// The MLX device, or why MLX could not start.
    pub device: &'a Result<DeviceInfo, crate::mlx::MlxError>,
    /// MLX's figures from the worker's last event.
    pub memory: &'a MemoryStats,
    /// The open checkpoint, if any.
    pub checkpoint: Option<&'a Checkpoint>,
    /// Errors and warnings the check found (of the open checkpoint).
    pub check_counts: (usize, usize),
    /// A checkpoint being opened.
    pub opening: Option<&'a std::path::Path>,
    /// What the previews hold, and their budget.
    pub previews: &'a crate::weights::PreviewsHeld,
}

/// The status bar. Its own state is what it computed once per checkpoint
/// from the headers (totals, parameters), so no frame walks 90k tensors.
#[derive(Debug, Default)]
pub(super) struct StatusBar {
    /// Tensor count and stored bytes.
    totals: Option<(usize, u64)>,
    /// Parameters as the model counts them, and how they are stored.
    params: Option<(u64, Option<String>)>,
}

impl StatusBar {
    /// Figures for a newly opened checkpoint.
    pub(super) fn opened(summary: &Summary) -> Self {
        Self {
            totals: Some((summary.tensor_count, summary.total_bytes)),
            params: Some((summary.logical_params, params_note(summary))),
        }
    }

    /// Draws the bar.
    pub(super) fn ui(
        &self,
        ui: &mut egui::Ui,
        inputs: &StatusInputs<'_>,
        commands: &CommandSender,
    ) {
        ui.horizontal_wrapped(|ui| {
            match inputs.device {
                Ok(device) => ui.label(device.describe()),
                Err(err) => ui.colored_label(ui.visuals().error_fg_color, format!("MLX: {err}")),
            };
            ui.separator();
            let memory = inputs.memory;
            ui.label(format!(
                "MLX active {}  cache {}  peak {}  limit {}",
                human_bytes(memory.active_bytes),
                human_bytes(memory.cache_bytes),
                human_bytes(memory.peak_bytes),
                human_bytes(memory.limit_bytes)
            ));
            // The truth about opening, beside what is open: a failed open
            // leaves the previous checkpoint (and its badge) in place.
            if let Some(path) = inputs.opening {
                ui.separator();
                ui.spinner();
                ui.label(format!(
                    "opening {}",
                    crate::units::Shown::new(&path.display().to_string())
                ));
            }
            // A failed open is said once: under the path field while a
            // checkpoint stays open, in the centre when none is.
            let Some(checkpoint) = inputs.checkpoint else {
                return;
            };
            ui.separator();
            if badge_ui(ui, inputs.check_counts) {
                commands.send(AppCommand::ShowTab(super::Tab::Check));
            }
            previews_ui(ui, inputs.previews, commands);
            if let Some((count, bytes)) = self.totals {
                ui.separator();
                ui.label(format!(
                    "{}, {} in {}",
                    crate::units::count_of(count, "tensor", "tensors"),
                    human_bytes(bytes),
                    crate::units::count_of(checkpoint.shards().len(), "shard", "shards")
                ));
            }
            if let Some((logical, note)) = &self.params {
                ui.separator();
                let text = match note {
                    Some(note) => format!("{} parameters ({note})", short_count(*logical)),
                    None => format!("{} parameters", short_count(*logical)),
                };
                // Last in the bar: cut at its end (whole on hover) rather
                // than split over two rows.
                ui.add(egui::Label::new(text).truncate()).on_hover_text(
                    "Logical parameters as mlx-lm counts them: packed quantized words counted as the weights they hold; scales, biases and FP8 block scales are overhead.\nAffine layers store float scales and biases; mxfp4 and mxfp8 store E8M0 scales and nvfp4 E4M3 scales, without biases.\nBits/weight: every stored byte over the parameters (mlx-lm's figure).",
                );
            }
        });
    }
}

/// The check badge; `true` when clicked.
fn badge_ui(ui: &mut egui::Ui, (errors, warnings): (usize, usize)) -> bool {
    let text = format!(
        "check: {errors} error{}, {warnings} warning{}",
        if errors == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" }
    );
    let color = if errors > 0 {
        ui.visuals().error_fg_color
    } else if warnings > 0 {
        ui.visuals().warn_fg_color
    } else {
        ui.visuals().text_color()
    };
    ui.add(egui::Button::new(egui::RichText::new(text).color(color)).small())
        .on_hover_text("What `weightscope check` finds (Ctrl+4)")
        .clicked()
}

/// The status bar's words on how the parameters are stored, short (the
/// details are in `inspect`): the main MLX mode and bits, other modes,
/// FP8 blocks, and the bits per weight of everything stored.
fn params_note(summary: &Summary) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(q) = &summary.quantization {
        // What the weights use, not config.json's default (which a mixed
        // recipe may use for none of them).
        let recipe = q.recipe();
        let mut modes: Vec<String> = Vec::new();
        for (p, _) in &recipe {
            let name = p.mode.name().to_owned();
            if !modes.contains(&name) {
                modes.push(name);
            }
        }
        let mut bits: Vec<u64> = recipe.iter().map(|(p, _)| p.bits).collect();
        bits.sort_unstable();
        bits.dedup();
        let bits: Vec<String> = bits.iter().map(u64::to_string).collect();
        parts.push(format!(
            "{}{} {}-bit",
            if recipe.len() > 1 { "mixed " } else { "" },
            modes.join(" + "),
            bits.join("/")
        ));
    }
    if let Some(f) = &summary.fp8 {
        parts.push(match f.block {
            Some([r, c]) => format!("FP8, {r}x{c} blocks"),
            None => "FP8".to_owned(),
        });
    }
    (!parts.is_empty()).then(|| {
        format!(
            "{}; {:.2} bits/weight",
            parts.join("; "),
            summary.bits_per_weight
        )
    })
}

/// "previews 212 MiB of 512 MiB": what the previews hold against their
/// budget; a click sets the budget.
fn previews_ui(
    ui: &mut egui::Ui,
    previews: &crate::weights::PreviewsHeld,
    commands: &CommandSender,
) {
    ui.separator();
    let pinned = match previews.pinned.len() {
        0 => String::new(),
        n => format!(
            ", {} pinned",
            crate::units::count_of(n, "tensor", "tensors")
        ),
    };
    let text = format!(
        "previews {} of {}{pinned}",
        human_bytes(previews.used_bytes),
        human_bytes(previews.limit_bytes)
    );
    let id = ui.make_persistent_id("preview-budget-field");
    ui.menu_button(text, |ui| {
        ui.label("Tensors shown stay in MLX memory, so that a second look is instant, within this budget; the least recently shown are let go first (pinned ones stay).");
        let mut typed: String = ui
            .data_mut(|d| d.get_temp::<String>(id))
            .unwrap_or_else(|| human_bytes(previews.limit_bytes));
        ui.horizontal(|ui| {
            let field = ui.add(
                egui::TextEdit::singleline(&mut typed)
                    .desired_width(90.0)
                    .hint_text("e.g. 512M"),
            );
            let field = field.labelled_by(ui.label("Budget").id);
            let enter = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            let parsed = crate::units::parse_size(&typed);
            if (ui.add_enabled(parsed.is_some(), egui::Button::new("Set")).clicked() || enter)
                && let Some(bytes) = parsed
            {
                commands.send(AppCommand::SetPreviewBudget(bytes));
                ui.close();
            }
        });
        ui.data_mut(|d| d.insert_temp(id, typed));
    });
}
