//! The profiler's controls: walk, record, limits, the job's output.

use super::{
    AppCommand, CommandSender, Duration, FinishedRun, FormKind, Policy, ProfilerInputs,
    ProfilerPanel, Run, Transform, human_bytes,
};

impl ProfilerPanel {
    /// The walk and record controls, the job's output, the limits, the
    /// trace buttons and the last message.
    pub(super) fn controls_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        if inputs.checkpoint.is_some() {
            self.walk_controls_ui(ui, inputs);
        } else {
            ui.horizontal_wrapped(|ui| {
                ui.label("Open a checkpoint to walk it, or record a job of your own:");
                self.record_buttons_ui(ui);
            });
        }
        self.record_status_ui(ui, inputs.commands);
        self.output_ui(ui);
        ui.separator();
        self.limits_ui(ui, inputs);
        ui.separator();
        self.trace_controls_ui(ui, inputs.commands);
        if let Some(message) = &self.message {
            ui.label(message);
        }
    }

    /// The recorded job's output (stdout and stderr, the last lines), while
    /// it runs and after.
    pub(super) fn output_ui(&self, ui: &mut egui::Ui) {
        let lines: Vec<&crate::profile::trace::job_end::OutputLine> =
            match (&self.recording, &self.last) {
                (Some(live), _) => live.output.iter().collect(),
                (
                    None,
                    Some(FinishedRun {
                        run: Run::Record(recording),
                        ..
                    }),
                ) => recording.output.iter().collect(),
                _ => return,
            };
        if lines.is_empty() {
            return;
        }
        crate::app::widgets::open_section(
            ui,
            format!(
                "Output of the job (last {} line{})",
                lines.len(),
                if lines.len() == 1 { "" } else { "s" }
            ),
            "job-output",
            |ui| {
                egui::ScrollArea::vertical()
                    .id_salt("job-output-lines")
                    .max_height(140.0)
                    .stick_to_bottom(true)
                    .auto_shrink([false, true])
                    .show(ui, |ui| {
                        let warn = ui.visuals().warn_fg_color;
                        for line in lines {
                            let text = egui::RichText::new(crate::units::Shown::new(&line.text))
                                .monospace();
                            ui.label(if line.stderr { text.color(warn) } else { text });
                        }
                    });
            },
        );
    }

    /// Opens the record form (`attach`: the attach form), unless a
    /// recording runs (the forms are off then, as their buttons are).
    pub(in crate::app) fn open_record_form(&mut self, attach: bool) {
        if self.recording.is_none() {
            self.record_form.open(if attach {
                FormKind::Attach
            } else {
                FormKind::Command
            });
        }
    }

    /// "Record a command…" and "Attach to process…" (off while one runs).
    pub(super) fn record_buttons_ui(&mut self, ui: &mut egui::Ui) {
        let busy = self.recording.is_some();
        ui.add_enabled_ui(!busy, |ui| {
            if crate::app::widgets::explained_button(ui, "Record a command…", "Run your own job (a conversion, a script) and record its memory: RSS, open shard files, MLX's counters from inside Python jobs")
            {
                self.record_form.open(FormKind::Command);
            }
            if crate::app::widgets::explained_button(ui, "Attach to process…", "Follow a running process and its children from outside")
            {
                self.record_form.open(FormKind::Attach);
            }
        });
    }

    /// The recording while it runs (its figures now, Stop), and the open form.
    pub(super) fn record_status_ui(&mut self, ui: &mut egui::Ui, commands: &CommandSender) {
        if let Some(live) = &mut self.recording {
            ui.horizontal_wrapped(|ui| {
                // A still mark, not a spinner: a spinner redraws the window
                // every frame, which a recorded job on a small machine pays
                // for (the window redraws a live recording a few times a
                // second, when samples come).
                ui.colored_label(egui::Color32::from_rgb(235, 60, 60), "REC");
                ui.label(live.status_text());
                let stop = ui
                    .button("Stop")
                    .on_hover_text("Send the job SIGINT (again: SIGTERM, then SIGKILL); the recording keeps what it saw. Attached: detach.");
                if stop.clicked() {
                    live.stopping = true;
                    commands.send(AppCommand::StopRecording);
                }
                let ask = ui
                    .button("Who holds it now?")
                    .on_hover_text("Ask the job's Python probe for a held-by walk now: the variables keeping MLX's memory alive (select the moment to see it).");
                if ask.clicked() {
                    commands.send(AppCommand::AskWhoHolds);
                }
            });
            // Keep the elapsed time moving should samples stop coming (the
            // recorder's wakes redraw a live recording a few times a second).
            ui.ctx().request_repaint_after(Duration::from_secs(1));
        }
        if let Some((target, checkpoint)) = self.record_form.ui(ui.ctx()) {
            commands.send(AppCommand::Record(target, checkpoint));
        }
    }

    pub(super) fn walk_controls_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.horizontal_wrapped(|ui| {
            ui.strong("Walk");
            let walking = self.running.is_some();
            ui.add_enabled_ui(!walking, |ui| {
                let label = ui.label("Policy");
                egui::ComboBox::from_id_salt("walk-policy")
                    .selected_text(self.policy.as_str())
                    .show_ui(ui, |ui| {
                        for policy in Policy::ALL {
                            ui.selectable_value(&mut self.policy, policy, policy.as_str());
                        }
                    })
                    .response
                    .labelled_by(label.id);
                let label = ui.label("Transform");
                egui::ComboBox::from_id_salt("walk-transform")
                    .selected_text(self.transform.as_str())
                    .show_ui(ui, |ui| {
                        for transform in Transform::ALL {
                            ui.selectable_value(
                                &mut self.transform,
                                transform,
                                transform.as_str(),
                            );
                        }
                    })
                    .response
                    .labelled_by(label.id)
                    .on_hover_text("none: read only; f16: cast f32/bf16 to f16; q4: MLX 4-bit quantize 2-D weights");
            });
            if walking {
                if ui.button("Cancel walk").clicked()
                    && let Some(token) = &self.cancel
                {
                    token.cancel();
                }
            } else if crate::app::widgets::explained_button(ui, "Run walk", "Materialize every tensor in shard order under the policy (releases everything first)")
            {
                self.start_walk(inputs);
            }
            if let Some(expected) = self.expected_now() {
                ui.label(format!(
                    "expected peak: {}",
                    human_bytes(self.policy.expected(&expected))
                ));
            }
            ui.separator();
            ui.strong("Record");
            self.record_buttons_ui(ui);
        });
        if let Some(walk) = &self.running {
            let fraction = if walk.total == 0 {
                0.0
            } else {
                walk.done as f32 / walk.total as f32
            };
            ui.add(egui::ProgressBar::new(fraction).text(format!(
                "{} {}: {} of {} tensors, {:.1} s",
                walk.policy.as_str(),
                walk.transform.as_str(),
                walk.done,
                walk.total,
                walk.started.elapsed().as_secs_f64()
            )));
        }
    }

    pub(super) fn limits_ui(&mut self, ui: &mut egui::Ui, inputs: &ProfilerInputs<'_>) {
        ui.horizontal_wrapped(|ui| {
            crate::app::widgets::labelled_field(
                ui,
                "MLX memory limit",
                &mut self.memory_limit_input,
                human_bytes(inputs.memory.limit_bytes),
                90.0,
            );
            if ui.button("Set limit").clicked() {
                match crate::units::parse_size(&self.memory_limit_input) {
                    Some(bytes) if bytes > 0 => {
                        inputs.commands.send(AppCommand::SetMemoryLimit(bytes));
                    }
                    _ => {
                        self.message = Some("the memory limit is a size such as 8G or 512M".into());
                    }
                }
            }
            crate::app::widgets::labelled_field(
                ui,
                "MLX cache limit",
                &mut self.cache_limit_input,
                "e.g. 1G",
                90.0,
            );
            if ui.button("Set cache limit").clicked() {
                match crate::units::parse_size(&self.cache_limit_input) {
                    Some(bytes) => inputs.commands.send(AppCommand::SetCacheLimit(bytes)),
                    None => {
                        self.message = Some("the cache limit is a size such as 1G or 0".into());
                    }
                }
            }
            ui.separator();
            let label = ui.label("Sample every (ms)");
            let changed = ui
                .add(egui::DragValue::new(&mut self.interval_ms).range(5..=5000))
                .labelled_by(label.id)
                .changed();
            if changed {
                let interval = Duration::from_millis(self.interval_ms);
                inputs
                    .commands
                    .send(AppCommand::SetSampleInterval(interval));
            }
            if let Some(sampler) = &inputs.sampler {
                let interval = Duration::from_millis(self.interval_ms);
                ui.label(format!(
                    "sampler: {:.0} us a sample, {:.2} % of one core",
                    sampler.mean_sample_time().as_secs_f64() * 1e6,
                    sampler.cost_percent(interval)
                ))
                .on_hover_text("Measured by the sampler on itself (wall time, an upper bound)");
            }
        });
    }
}
