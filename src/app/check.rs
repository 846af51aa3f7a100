//! The Check tab: what `weightscope check` finds in the open checkpoint
//! (headers on open; values on demand, on the MLX worker, with progress and
//! cancel), a badge for the status bar, rows that select their tensor.
//! The panel owns its state and pushes what it wants done as commands.

use crate::finding::{Finding, Severity};
use crate::units::{Shown, human_bytes};
use crate::weights::{Progress, ValueScan};
use crate::worker::{CancelToken, RequestError};

use super::commands::{AppCommand, CommandSender};
use super::job_view::JobView;

/// The Check tab's state.
#[derive(Default)]
pub struct CheckPanel {
    header: Vec<Finding>,
    scan: Option<Box<ValueScan>>,
    /// The value scan.
    job: JobView,
}

impl CheckPanel {
    /// A checkpoint opened with these header findings: the last scan is gone.
    pub fn opened(&mut self, findings: Vec<Finding>) {
        *self = Self {
            header: findings,
            ..Self::default()
        };
    }

    /// A scan was asked for, cancelled through `cancel`.
    pub fn scan_started(&mut self, cancel: CancelToken) {
        self.job.started(cancel);
    }

    /// A scan read one more tensor.
    pub fn progress(&mut self, progress: Progress) {
        self.job.progress(progress);
    }

    /// A scan ended.
    pub fn finished(&mut self, result: Result<Box<ValueScan>, RequestError>) {
        if let Some(scan) = self.job.finished(result) {
            self.scan = Some(scan);
        }
    }

    /// Whether a scan runs.
    #[must_use]
    pub fn is_scanning(&self) -> bool {
        self.job.is_running()
    }

    /// Whether the running (or last) scan was asked to stop.
    #[must_use]
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn cancel_requested(&self) -> bool {
        self.job.cancel_requested()
    }

    /// Every finding so far, errors first.
    #[must_use]
    pub fn findings(&self) -> Vec<&Finding> {
        let mut all: Vec<&Finding> = self
            .header
            .iter()
            .chain(self.scan.iter().flat_map(|s| s.findings.iter()))
            .collect();
        all.sort_by_key(|f| f.severity);
        all
    }

    fn count(&self, severity: Severity) -> usize {
        self.findings()
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// How many errors and warnings were found (the status bar's badge).
    #[must_use]
    pub fn counts(&self) -> (usize, usize) {
        (self.count(Severity::Error), self.count(Severity::Warning))
    }

    /// Draws the tab; what the user asks for goes to `commands`.
    pub fn ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        ui.horizontal_wrapped(|ui| {
            let (errors, warnings, infos) = (
                self.count(Severity::Error),
                self.count(Severity::Warning),
                self.count(Severity::Info),
            );
            let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
            ui.label(format!(
                "{}, {}, {infos} info ({})",
                plural(errors, "error"),
                plural(warnings, "warning"),
                if self.scan.is_some() {
                    "headers and values"
                } else {
                    "headers only"
                }
            ));
            if self.job.is_running() {
                self.job
                    .cancel_button(ui, "Cancel", "Stop before the next tensor");
            } else if crate::app::widgets::explained_button(ui, "Read values", "Read every tensor through MLX, shard by shard: NaN/Inf, all-zero tensors, zero or non-finite scales (check --values)")
            {
                commands.send(AppCommand::ScanValues);
            }
        });
        self.job.progress_ui(ui, " read");
        if let Some(scan) = &self.scan {
            ui.label(format!(
                "Values: {} of {} tensors read{}{}; peak MLX active {} (bound {})",
                scan.scanned,
                scan.total,
                scan.unreadable_note(),
                if scan.cancelled { ", cancelled" } else { "" },
                human_bytes(scan.peak_mlx_active_bytes),
                human_bytes(scan.bound_bytes)
            ));
        }
        self.job.error_ui(ui, "check");
        ui.separator();
        let findings = self.findings();
        if findings.is_empty() {
            ui.label("Nothing found.");
            return;
        }
        findings_ui(ui, &findings, commands);
    }
}

/// The list of findings; a click on a tensor selects it.
fn findings_ui(ui: &mut egui::Ui, findings: &[&Finding], commands: &CommandSender) {
    egui::ScrollArea::vertical()
        .id_salt("check-scroll")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            for f in findings.iter().copied() {
                let color = match f.severity {
                    Severity::Error => ui.visuals().error_fg_color,
                    Severity::Warning => ui.visuals().warn_fg_color,
                    Severity::Info => ui.visuals().text_color(),
                };
                ui.horizontal(|ui| {
                    ui.label(egui::RichText::new(f.severity.name()).color(color).strong());
                    ui.label(egui::RichText::new(f.code).monospace());
                    let place = match (&f.subject.tensor, &f.subject.file) {
                        (Some(t), _) => Shown::new(t).into_string(),
                        (None, Some(file)) => Shown::new(file).into_string(),
                        (None, None) => String::new(),
                    };
                    if let Some(tensor) = &f.subject.tensor {
                        if ui
                            .link(place)
                            .on_hover_text("Select and materialize this tensor")
                            .clicked()
                        {
                            commands.send(AppCommand::SelectStored(tensor.clone()));
                        }
                    } else if !place.is_empty() {
                        ui.label(place);
                    }
                });
                ui.add(egui::Label::new(Shown::new(&f.message)).wrap());
                ui.add_space(4.0);
            }
        });
}
