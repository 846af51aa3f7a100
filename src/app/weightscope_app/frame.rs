//! One frame drawn: the look, the top bar, the tabs and their panels,
//! the global keys.

use crate::app::widgets;
use std::path::PathBuf;

use crate::weights::{BUILTIN_VIEWS, OpenStep, ViewChoice};

use crate::app::commands::AppCommand;
use crate::app::profiler::{ProfilerInputs, ProfilerPanel};
use crate::app::status_bar::StatusInputs;

use super::{Dialog, STRIP_FROM_HEIGHT, Tab, WeightscopeApp};

impl WeightscopeApp {
    /// [`AppCommand::SetTheme`]: saved, and put on the window next frame.
    pub(in crate::app) fn set_theme(&mut self, theme: Option<egui::Theme>) {
        self.settings.theme = theme.map(|t| match t {
            egui::Theme::Light => "light".to_owned(),
            egui::Theme::Dark => "dark".to_owned(),
        });
        self.settings_dirty = true;
        self.look_applied = false;
    }

    /// The saved zoom and theme, put on the context once (and again after
    /// a change); a zoom the user makes (Ctrl+plus, Ctrl+minus, Ctrl+0)
    /// is saved.
    pub(in crate::app) fn apply_look(&mut self, ctx: &egui::Context) {
        if !self.look_applied {
            self.look_applied = true;
            if let Some(percent) = self
                .settings
                .zoom_percent
                .filter(|p| (50..=300).contains(p))
            {
                #[allow(clippy::cast_precision_loss)]
                ctx.set_zoom_factor(percent as f32 / 100.0);
            }
            let preference = match self.settings.theme.as_deref() {
                Some("light") => egui::ThemePreference::Light,
                Some("dark") => egui::ThemePreference::Dark,
                _ => egui::ThemePreference::System,
            };
            ctx.options_mut(|o| o.theme_preference = preference);
            return;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let percent = (ctx.zoom_factor() * 100.0).round() as u32;
        let saved = self.settings.zoom_percent.unwrap_or(100);
        if percent != saved {
            self.settings.zoom_percent = (percent != 100).then_some(percent);
            self.settings_dirty = true;
        }
    }

    /// Draws the whole window into `ui`.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        self.apply_look(&ctx);
        self.shortcuts_ui(&ctx);
        self.global_keys(&ctx);
        let chosen = self.palette.ui(
            &ctx,
            self.checkpoint.as_deref(),
            &self.settings.recent,
            &|i| match self.checkpoint.as_deref() {
                Some(checkpoint) => self.tensors.facts(checkpoint, i),
                None => crate::checkpoint::query::TensorFacts::default(),
            },
        );
        if let Some(command) = chosen.and_then(|entry| entry.command()) {
            self.commands.send(command);
        }
        egui::Panel::top("top").show(ui, |ui| self.top_bar_ui(ui));
        egui::Panel::bottom("status").show(ui, |ui| {
            let inputs = StatusInputs {
                device: &self.device,
                memory: &self.memory,
                checkpoint: self.checkpoint.as_deref(),
                check_counts: self.check.counts(),
                opening: self.opening.as_deref(),
                previews: &self.previews,
            };
            self.status.ui(ui, &inputs, &self.commands);
        });
        // Side panels and the strip take a share of the window, so the
        // centre keeps room for its tabs from 800x500 up, also after the
        // window shrinks (a panel widened in a large window is narrowed
        // back: at most 25 % and 35 % of the width).
        let (width, height) = (ui.available_width(), ui.available_height());
        let gpu = self
            .device
            .as_ref()
            .is_ok_and(|d| d.kind == crate::mlx::DeviceKind::Gpu);
        // The Profiler tab plots the same series larger: no strip there,
        // its room goes to the plot.
        // Nor in a short window (800x500): the table's rows come first, and
        // the status bar keeps MLX's figures live.
        if self.tab != Tab::Profiler && height >= STRIP_FROM_HEIGHT {
            egui::Panel::bottom("memory")
                .resizable(true)
                // A fifth of the window (at 1400x900, room for three
                // labelled marks on its memory axis), up to 180 points.
                .default_size(180.0_f32.min(height * 0.2))
                .size_range(60.0..=(height * 0.25).max(60.0))
                .show(ui, |ui| {
                    let budget = (self.previews.kept > 0).then_some(self.previews.limit_bytes);
                    self.strip.ui(ui, &self.timeline, gpu, budget);
                });
        }
        if let Some(checkpoint) = self.checkpoint.clone() {
            egui::Panel::left("shards")
                .default_size(320.0_f32.min(width * 0.2))
                .size_range(120.0..=(width * 0.25).max(120.0))
                .show(ui, |ui| self.shards.ui(ui, &checkpoint, &self.commands));
            if self.tab == Tab::Tensors {
                egui::Panel::right("inspector")
                    .default_size(420.0_f32.min(width * 0.3))
                    .size_range(180.0..=(width * 0.35).max(180.0))
                    .show(ui, |ui| {
                        self.inspector.ui(ui, &self.previews.pinned, &self.commands);
                    });
            }
        }
        egui::CentralPanel::default().show(ui, |ui| {
            self.tab_bar_ui(ui);
            ui.separator();
            match self.tab {
                Tab::Tensors => self.tensors_tab_ui(ui),
                Tab::Profiler => self.profiler_tab_ui(ui),
                Tab::Diff => self.diff_tab_ui(ui),
                Tab::Check => self.check_tab_ui(ui),
            }
        });
        self.run_commands();
    }

    /// F1: the keyboard shortcuts, in a window that F1 or Esc closes.
    pub(in crate::app) fn shortcuts_ui(&mut self, ctx: &egui::Context) {
        // '?' typed outside a text field opens the list too.
        let question = ctx.memory(|m| m.focused().is_none())
            && ctx.input(|i| {
                i.events
                    .iter()
                    .any(|e| matches!(e, egui::Event::Text(t) if t == "?"))
            });
        if ctx.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::F1)) || question {
            self.show_shortcuts = !self.show_shortcuts;
        }
        if !self.show_shortcuts {
            return;
        }
        if ctx.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Escape)) {
            self.show_shortcuts = false;
            return;
        }
        egui::Window::new("Keyboard shortcuts")
            .open(&mut self.show_shortcuts)
            .collapsible(false)
            .resizable(false)
            .show(ctx, |ui| {
                egui::Grid::new("shortcuts").striped(true).show(ui, |ui| {
                    for (keys, what) in crate::app::keymap::shortcut_list() {
                        ui.monospace(keys);
                        ui.label(what);
                        ui.end_row();
                    }
                });
            });
    }

    /// Keys that work on every tab: Ctrl+K (or Ctrl+Shift+P) opens the
    /// palette; the global keys of `keymap` send their commands.
    pub(in crate::app) fn global_keys(&mut self, ctx: &egui::Context) {
        use egui::{Key, Modifiers};
        // Keys typed in Ctrl+K's own frame are the palette's first letters.
        let palette = widgets::shortcut_with_typing(ctx, Key::K);
        let other_palette =
            ctx.input_mut(|i| i.consume_key(Modifiers::COMMAND | Modifiers::SHIFT, Key::P));
        if let Some(typed) = palette.or_else(|| other_palette.then(String::new)) {
            self.palette.toggle(&typed);
        }
        for command in crate::app::keymap::global_keys(ctx) {
            self.commands.send(command);
        }
    }

    pub(in crate::app) fn tab_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.tab, Tab::Tensors, "Tensors")
                .on_hover_text("Ctrl+1");
            ui.selectable_value(&mut self.tab, Tab::Profiler, "Profiler")
                .on_hover_text("Ctrl+2: walks, findings, limits, traces");
            ui.selectable_value(&mut self.tab, Tab::Diff, "Diff")
                .on_hover_text("Ctrl+3: compare with another checkpoint");
            ui.selectable_value(&mut self.tab, Tab::Check, "Check")
                .on_hover_text("Ctrl+4: what is wrong with this checkpoint");
            if ui
                .small_button("?")
                .on_hover_text("Keyboard shortcuts (F1)")
                .clicked()
            {
                self.show_shortcuts = true;
            }
            if self.tab != Tab::Profiler
                && let Some(brief) = self.profiler.recording_brief()
            {
                ui.colored_label(egui::Color32::from_rgb(235, 60, 60), "REC");
                ui.label(brief)
                    .on_hover_text("Ctrl+2: the live graph and Stop");
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(250));
            }
            if let Some(walk) = self.profiler.running() {
                ui.spinner();
                ui.label(format!(
                    "walking {}: {} of {}",
                    walk.policy.as_str(),
                    walk.done,
                    walk.total
                ));
            }
        });
    }

    pub(in crate::app) fn tensors_tab_ui(&mut self, ui: &mut egui::Ui) {
        let Some(checkpoint) = self.checkpoint.clone() else {
            let text = match (&self.opening, &self.open_error) {
                (Some(path), _) => format!(
                    "Opening {}… (progress beside the path field)",
                    crate::units::Shown::new(&path.display().to_string())
                ),
                (None, Some(error)) => format!(
                    "Nothing is open: {}\nType another folder or .safetensors path above and press Enter.",
                    crate::units::Shown::new(error)
                ),
                (None, None) => {
                    "Open a checkpoint: type a folder or .safetensors path above and press Enter."
                        .to_owned()
                }
            };
            ui.centered_and_justified(|ui| {
                ui.label(text);
            });
            return;
        };
        self.tensors.ui(ui, &checkpoint, &self.commands);
    }

    /// Runs `f` on the profiler panel with what it reads from the app
    /// (disjoint fields: the panel is borrowed mutably, the rest shared).
    pub(in crate::app) fn with_profiler<R>(
        &mut self,
        f: impl FnOnce(&mut ProfilerPanel, &ProfilerInputs<'_>) -> R,
    ) -> R {
        let inputs = ProfilerInputs {
            timeline: &self.timeline,
            checkpoint: self.checkpoint.as_deref(),
            memory: &self.memory,
            sampler: self.sampler.as_ref(),
            device: &self.device,
            commands: &self.commands,
        };
        f(&mut self.profiler, &inputs)
    }

    pub(in crate::app) fn profiler_tab_ui(&mut self, ui: &mut egui::Ui) {
        self.with_profiler(|profiler, inputs| profiler.ui(ui, inputs));
    }

    pub(in crate::app) fn diff_tab_ui(&mut self, ui: &mut egui::Ui) {
        let a = self.checkpoint.as_ref().map(|c| c.root().to_path_buf());
        self.diff.ui(ui, a.as_deref(), &self.commands);
    }

    pub(in crate::app) fn check_tab_ui(&mut self, ui: &mut egui::Ui) {
        if self.checkpoint.is_none() {
            ui.label("Open a checkpoint to check it.");
            return;
        }
        self.check.ui(ui, &self.commands);
    }

    pub(in crate::app) fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        // A folder or file dropped on the window opens like a typed path.
        let dropped = ui.input(|i| i.raw.dropped_files.first().map(|f| f.path().to_path_buf()));
        if let Some(path) = dropped {
            self.commands.send(AppCommand::Open(path));
        }
        // Wraps on a narrow window: every control stays on screen.
        ui.horizontal_wrapped(|ui| {
            ui.strong("weightscope");
            ui.separator();
            if crate::app::widgets::explained_button(
                ui,
                "Open checkpoint…",
                "Choose a model folder",
            ) {
                self.commands.send(AppCommand::Dialog(Dialog::PickFolder));
            }
            if crate::app::widgets::explained_button(
                ui,
                "Open file…",
                "Choose one .safetensors file",
            ) {
                self.commands.send(AppCommand::Dialog(Dialog::PickFile));
            }
            if crate::app::widgets::explained_button(
                ui,
                "Open Hub repo…",
                "Read a Hugging Face repo's headers without downloading it: \
                     hf://ORG/REPO[@REVISION][/FOLDER] in the path field",
            ) {
                self.commands.send(AppCommand::FocusPath("hf://".into()));
            }
            let mut chosen = None;
            ui.add_enabled_ui(!self.settings.recent.is_empty(), |ui| {
                ui.menu_button("Recent", |ui| {
                    for path in &self.settings.recent {
                        if ui.button(path.display().to_string()).clicked() {
                            chosen = Some(path.clone());
                        }
                    }
                });
            });
            if let Some(path) = chosen {
                self.commands.send(AppCommand::Open(path));
            }
            ui.separator();
            let field = ui.add(
                egui::TextEdit::singleline(&mut self.path_input)
                    .hint_text("folder, .safetensors file, or hf://ORG/REPO")
                    .desired_width(480.0_f32.min(ui.available_width() - 120.0).max(120.0)),
            );
            let field = field.labelled_by(ui.label("Checkpoint path").id);
            let typed = widgets::shortcut_with_typing(ui.ctx(), egui::Key::O)
                .or_else(|| self.focus_path.take());
            if let Some(typed) = typed {
                widgets::focus_selecting_all(ui, &field, &mut self.path_input, &typed);
            }
            // The Enter that opens is consumed here: the tensors table must not
            // also take it as "materialize the selected row".
            let entered = field.lost_focus()
                && ui.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Enter));
            if ui.button("Open").clicked() || entered {
                let path = PathBuf::from(self.path_input.trim());
                self.commands.send(AppCommand::Open(path));
            }
            if let Some(path) = &self.opening {
                ui.spinner();
                let (what, done, total) = match self.open_step {
                    Some(OpenStep::Headers { parsed, total }) => ("headers", parsed, total),
                    Some(OpenStep::Maps { opened, total }) => ("MLX maps", opened, total),
                    None => ("", 0, 0),
                };
                if total > 0 {
                    #[allow(clippy::cast_precision_loss)]
                    let fraction = done as f32 / total as f32;
                    ui.add(
                        egui::ProgressBar::new(fraction)
                            .desired_width(120.0)
                            .text(format!("{what} {done}/{total}")),
                    );
                }
                ui.label(format!("opening {}", path.display()));
            }
        });
        self.view_bar_ui(ui);
        // Said here while what was open stays shown (the centre says it
        // when nothing is open): one line, never one per place.
        if let Some(error) = &self.open_error
            && self.checkpoint.is_some()
        {
            ui.colored_label(
                ui.visuals().error_fg_color,
                format!(
                    "open failed: {} (the checkpoint shown is still the one that was open)",
                    crate::units::Shown::new(error)
                ),
            );
        }
        if let Some(notice) = &self.notice {
            ui.colored_label(ui.visuals().warn_fg_color, crate::units::Shown::new(notice));
        }
    }

    pub(in crate::app) fn view_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            let label = ui.label("View");
            let current = match &self.view_choice {
                ViewChoice::Auto => "auto".to_owned(),
                ViewChoice::Identity => "identity".to_owned(),
                ViewChoice::Builtin(name) => name.clone(),
                ViewChoice::File(_) => "file".to_owned(),
            };
            let mut chosen = None;
            egui::ComboBox::from_id_salt("view-choice")
                .selected_text(&current)
                .show_ui(ui, |ui| {
                    let mut options = vec![
                        ("auto", ViewChoice::Auto),
                        ("identity", ViewChoice::Identity),
                    ];
                    for name in BUILTIN_VIEWS {
                        options.push((name, ViewChoice::Builtin(name.to_owned())));
                    }
                    for (text, choice) in options {
                        if ui.selectable_label(current == text, text).clicked() {
                            chosen = Some(choice);
                        }
                    }
                    if ui.selectable_label(current == "file", "file").clicked() {
                        chosen = Some(ViewChoice::File(PathBuf::from(self.view_file_input.trim())));
                    }
                })
                .response
                .labelled_by(label.id)
                .on_hover_text(
                    "How stored names map to the names a model graph asks for; changing it reopens the checkpoint",
                );
            crate::app::widgets::labelled_field(ui, "View file", &mut self.view_file_input, "view.json (rename, drop, fixup rules)", 260.0);
            if ui.button("Use view file").clicked() {
                chosen = Some(ViewChoice::File(PathBuf::from(self.view_file_input.trim())));
            }
            if let Some(choice) = chosen {
                self.set_view_choice(choice);
            }
            match &self.tensors.view {
                Some(view) => ui.label(format!("installed: {}", view.name)),
                None => ui.label("installed: none (stored names)"),
            };
        });
    }
}
