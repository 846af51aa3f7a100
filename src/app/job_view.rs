//! A long job's state as a panel shows it: running since when, how far,
//! its cancel token, and the last failure. The Check and Diff panels keep
//! one each; what the job produces stays the panel's.

use std::time::Instant;

use crate::weights::Progress;
use crate::worker::{CancelToken, RequestError};

/// A job the worker runs for a panel.
#[derive(Default)]
pub struct JobView {
    running: Option<(Progress, Instant)>,
    cancel: Option<CancelToken>,
    error: Option<String>,
}

impl JobView {
    /// The app sent the job with `cancel` (the panel's Cancel button's):
    /// it runs from now, and the last failure is gone.
    pub fn started(&mut self, cancel: CancelToken) {
        self.error = None;
        self.cancel = Some(cancel);
        self.running = Some((
            Progress {
                done: 0,
                total: 0,
                name: String::new(),
            },
            Instant::now(),
        ));
    }

    /// The job went one step further.
    pub fn progress(&mut self, progress: Progress) {
        if let Some((current, _)) = &mut self.running {
            *current = progress;
        }
    }

    /// The job ended: what it made, or `None` with its failure kept.
    pub fn finished<T>(&mut self, result: Result<T, RequestError>) -> Option<T> {
        self.running = None;
        result.map_err(|e| self.error = Some(e.to_string())).ok()
    }

    /// Shows a failure that is not the job's (say, nothing was chosen).
    pub fn fail(&mut self, message: String) {
        self.error = Some(message);
    }

    /// Forgets the last failure.
    pub fn clear_error(&mut self) {
        self.error = None;
    }

    /// Whether the job runs.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Whether the running (or last) job was asked to stop.
    #[must_use]
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn cancel_requested(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// The Cancel button of a running job (`label`, `hover`); asks the job
    /// to stop when clicked.
    pub fn cancel_button(&self, ui: &mut egui::Ui, label: &str, hover: &str) {
        let button = ui.button(label);
        let button = if hover.is_empty() {
            button
        } else {
            button.on_hover_text(hover)
        };
        if button.clicked()
            && let Some(token) = &self.cancel
        {
            token.cancel();
        }
    }

    /// The running job's progress bar (`what`: said after "tensors").
    pub fn progress_ui(&self, ui: &mut egui::Ui, what: &str) {
        if let Some((p, since)) = &self.running {
            super::widgets::job_progress(ui, (p.done, p.total), what, *since, &p.name);
        }
    }

    /// The last failure, prefixed by `job`.
    pub fn error_ui(&self, ui: &mut egui::Ui, job: &str) {
        if let Some(error) = &self.error {
            ui.colored_label(ui.visuals().error_fg_color, format!("{job}: {error}"));
        }
    }
}
