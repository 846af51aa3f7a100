//! Recording a user's job from the profiler tab: the "Record a command…"
//! and "Attach to process…" forms, and the recording while it runs. The
//! recorder itself runs on its own thread (`profile::capture`); this module
//! holds what the tab shows of it.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use crate::memory::Sample;
use crate::profile::capture::{JobSpec, OUTPUT_LINES, Target, Update};
use crate::profile::trace::job_end::OutputLine;
use crate::profile::{JobInfo, Trace};
use crate::units::human_bytes;

/// Why the record form cannot start a recording yet.
#[derive(Debug, thiserror::Error)]
pub(super) enum FormError {
    /// The attach field is not a number.
    #[error("`{0}` is not a process id")]
    NotAPid(String),
    /// The command line is empty.
    #[error("type the command to record")]
    NoCommand,
    /// An environment line without `=`.
    #[error("`{0}` is not KEY=VALUE")]
    NotKeyValue(String),
}

/// The forms' fields, kept between openings.
#[derive(Debug, Default)]
pub(super) struct RecordForm {
    /// Which form is open.
    pub open: Option<FormKind>,
    /// The command line (split like a shell would, without running one).
    pub command: String,
    /// The working folder (empty: weightscope's).
    pub cwd: String,
    /// Environment additions, one `KEY=VALUE` a line.
    pub env: String,
    /// The pid to attach to.
    pub pid: String,
    /// The checkpoint the job works on (empty: the folder of the first
    /// shard it opens).
    pub checkpoint: String,
    /// Why the last Start could not go.
    pub error: Option<String>,
    /// Put the keyboard in the first field on the next frame.
    focus_pending: bool,
}

/// The two forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormKind {
    /// Start a command and record it.
    Command,
    /// Follow a running process.
    Attach,
}

impl RecordForm {
    /// Opens `kind`'s form with the keyboard in its first field.
    pub fn open(&mut self, kind: FormKind) {
        self.open = Some(kind);
        self.error = None;
        self.focus_pending = true;
    }

    /// What the form asks to record, or why it cannot.
    pub fn target(&self) -> Result<Target, FormError> {
        if self.open == Some(FormKind::Attach) {
            return self
                .pid
                .trim()
                .parse::<u32>()
                .map(Target::Attach)
                .map_err(|_| FormError::NotAPid(self.pid.trim().to_owned()));
        }
        // Run by `sh -c`, as a terminal would run the line: `&&`, pipes,
        // variables and redirections work.
        let line = self.command.trim();
        if line.is_empty() {
            return Err(FormError::NoCommand);
        }
        let argv = ["sh", "-c", line];
        let mut env = Vec::new();
        for line in self.env.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (key, value) = line
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| FormError::NotKeyValue(line.to_owned()))?;
            env.push((OsString::from(key), OsString::from(value)));
        }
        let cwd = self.cwd.trim();
        Ok(Target::Spawn(JobSpec {
            argv: argv.into_iter().map(OsString::from).collect(),
            cwd: (!cwd.is_empty()).then(|| PathBuf::from(cwd)),
            env,
            capture_output: true,
        }))
    }

    /// The checkpoint field, when filled.
    pub fn checkpoint(&self) -> Option<PathBuf> {
        let text = self.checkpoint.trim();
        (!text.is_empty()).then(|| PathBuf::from(text))
    }

    /// The form's fields: the command, working folder and environment, or
    /// the pid; `true` when Enter was pressed in the first. That field is
    /// focused when the form opens (`focus`) before it is drawn, so that
    /// letters typed in the frame the form opens land in it.
    fn fields_ui(&mut self, ui: &mut egui::Ui, kind: FormKind, focus: bool) -> bool {
        let (about, label, text, hint, width) = match kind {
            FormKind::Command => (
                "Runs the command and records its memory until it exits: RSS of its processes, the shard files they hold open, and MLX's counters and source lines from inside Python jobs.",
                "Command line (run by sh -c)",
                &mut self.command,
                "python -m mlx_lm convert --hf-path ./model -q",
                f32::INFINITY,
            ),
            FormKind::Attach => (
                "Follows a running process and its children from outside (RSS, open shard files; a Python process's stacks read from its memory, as py-spy reads them) until it exits or you press Stop.",
                "Process id",
                &mut self.pid,
                "",
                120.0,
            ),
        };
        ui.label(about);
        let id = ui.make_persistent_id(label);
        let label = ui.label(label);
        if focus {
            ui.memory_mut(|m| m.request_focus(id));
        }
        let field = ui
            .add(
                egui::TextEdit::singleline(text)
                    .id(id)
                    .hint_text(hint)
                    .desired_width(width),
            )
            .labelled_by(label.id);
        if focus {
            Self::keep_typed(ui, &field, text, &mut self.focus_pending);
        }
        let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
        if kind == FormKind::Command {
            crate::app::widgets::labelled_field(
                ui,
                "Working folder",
                &mut self.cwd,
                "(weightscope's own)",
                f32::INFINITY,
            );
            let label = ui.label("Environment additions (KEY=VALUE, one a line)");
            ui.add(
                egui::TextEdit::multiline(&mut self.env)
                    .desired_rows(3)
                    .desired_width(f32::INFINITY),
            )
            .labelled_by(label.id);
        }
        entered
    }

    /// On a frame the form asked for the keyboard: a new window's first
    /// frame only measures itself and takes no keys, so the field cannot
    /// have it yet. Letters typed then are the field's all the same, and
    /// it asks again on the next frame.
    fn keep_typed(ui: &egui::Ui, field: &egui::Response, text: &mut String, pending: &mut bool) {
        if field.has_focus() || !ui.is_sizing_pass() {
            return;
        }
        ui.input(|i| {
            for event in &i.events {
                if let egui::Event::Text(typed) = event {
                    text.push_str(typed);
                }
            }
        });
        *pending = true;
    }

    /// Draws the open form as a window; returns the target and the
    /// checkpoint field when Start (or Attach) was pressed with valid fields.
    pub fn ui(&mut self, ctx: &egui::Context) -> Option<(Target, Option<PathBuf>)> {
        let kind = self.open?;
        let mut start = false;
        let mut close = false;
        let title = match kind {
            FormKind::Command => "Record a command",
            FormKind::Attach => "Attach to process",
        };
        let focus = std::mem::take(&mut self.focus_pending);
        egui::Window::new(title)
            .collapsible(false)
            .resizable(true)
            .default_width(520.0)
            .pivot(egui::Align2::CENTER_TOP)
            .default_pos(ctx.content_rect().center_top() + egui::vec2(0.0, 90.0))
            .show(ctx, |ui| {
                start |= self.fields_ui(ui, kind, focus);
                crate::app::widgets::labelled_field(ui, "Checkpoint (empty: the folder of the first shard the job opens)", &mut self.checkpoint, "/models/Qwen3-8B", f32::INFINITY)
                .on_hover_text("What the findings compare the job with: its size and what a walk of it would peak at");
                if let Some(error) = &self.error {
                    ui.colored_label(ui.visuals().error_fg_color, crate::units::Shown::new(error));
                }
                ui.horizontal(|ui| {
                    let text = match kind {
                        FormKind::Command => "Start",
                        FormKind::Attach => "Attach",
                    };
                    if ui.button(text).clicked() {
                        start = true;
                    }
                    if ui.button("Cancel").clicked() {
                        close = true;
                    }
                });
            });
        // Esc closes the form, as Cancel does.
        if ctx.input_mut(|i| i.consume_key(egui::Modifiers::NONE, egui::Key::Escape)) {
            close = true;
            start = false;
        }
        if close {
            self.open = None;
            self.error = None;
        }
        if !start {
            return None;
        }
        match self.target() {
            Ok(target) => {
                self.open = None;
                self.error = None;
                Some((target, self.checkpoint()))
            }
            Err(error) => {
                self.error = Some(error.to_string());
                None
            }
        }
    }
}

/// A recording in progress, as the tab shows it.
#[derive(Debug)]
pub(super) struct LiveRecording {
    /// The command line, or `pid N`.
    pub command: String,
    /// The job's pid once started.
    pub pid: Option<u32>,
    /// When it started.
    pub started: Instant,
    /// When it started, on the session clock.
    pub start_secs: f64,
    /// What came so far, on the recording's clock (drawn live).
    pub trace: Trace,
    /// The last sample.
    pub last: Option<Sample>,
    /// Whether Stop was pressed.
    pub stopping: bool,
    /// The job's output so far (the last lines).
    pub output: std::collections::VecDeque<OutputLine>,
}

impl LiveRecording {
    /// A recording of `command` that starts now.
    pub fn new(command: String, start_secs: f64) -> Self {
        let mut trace = Trace::new(format!("record: {command}"));
        trace.device = "job".into();
        trace.job = Some(JobInfo {
            command: command.clone(),
            ..JobInfo::default()
        });
        Self {
            command,
            pid: None,
            started: Instant::now(),
            start_secs,
            trace,
            last: None,
            stopping: false,
            output: std::collections::VecDeque::new(),
        }
    }

    /// Adds what the recorder sent.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Started(pid) => self.pid = Some(pid),
            Update::Sample(sample) => {
                if sample.mlx.is_some()
                    && let Some(job) = &mut self.trace.job
                {
                    job.probe = true;
                }
                self.trace.push_sample(&sample);
                self.last = Some(sample);
            }
            Update::Event(event) => self.trace.events.push(event),
            Update::Stacks(update) => self
                .trace
                .stacks
                .get_or_insert_with(Default::default)
                .apply(update),
            Update::Output(line) => self.push_output(line),
            // Shown with the job's output, where the panel says what the
            // job said.
            Update::Note(text) => self.push_output(OutputLine {
                stderr: true,
                text: format!("weightscope: {text}"),
            }),
        }
    }

    fn push_output(&mut self, line: OutputLine) {
        if self.output.len() == OUTPUT_LINES {
            self.output.pop_front();
        }
        self.output.push_back(line);
    }

    /// One line: what runs, for how long, and its memory now.
    pub fn status_text(&self) -> String {
        let pid = self.pid.map_or(String::new(), |p| format!(" (pid {p})"));
        let mut text = format!(
            "recording `{}`{pid}: {:.1} s",
            crate::units::Shown::new(&self.command),
            self.started.elapsed().as_secs_f64()
        );
        if let Some(s) = &self.last {
            let _ = write!(
                text,
                ", RSS {} in {} process{}, {} shard file{} open",
                human_bytes(s.process.rss_bytes),
                s.process.processes,
                if s.process.processes == 1 { "" } else { "es" },
                s.process.open_files,
                if s.process.open_files == 1 { "" } else { "s" }
            );
            if let Some(gpu) = s.gpu.map(|g| g.process_bytes) {
                let _ = write!(text, ", GPU {}", human_bytes(gpu));
            }
            if let Some(m) = s.mlx {
                let _ = write!(
                    text,
                    ", MLX active {} cache {}",
                    human_bytes(m.active_bytes),
                    human_bytes(m.cache_bytes)
                );
            }
        }
        if self.stopping {
            text.push_str(" (stopping: SIGINT sent)");
        }
        text
    }
}
