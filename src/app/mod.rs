//! The egui user interface. Panels draw into an `egui::Ui` and never depend on
//! eframe or rfd, so they can be driven headlessly in tests; [`shell`] is the
//! thin eframe edge.

pub mod shell;

use std::path::PathBuf;

use crate::mlx::DeviceInfo;

/// Everything the window shows, independent of eframe.
pub struct WeightscopeApp {
    /// What the app was asked to open (`None`: the bundled demo).
    path: Option<PathBuf>,
    /// MLX's default device, or why it could not be read.
    device: Result<DeviceInfo, String>,
}

impl WeightscopeApp {
    /// A new app for `path` (`None`: the bundled demo checkpoint).
    #[must_use]
    pub fn new(path: Option<PathBuf>, device: Result<DeviceInfo, String>) -> Self {
        Self { path, device }
    }

    /// Draws the whole window into `ui`.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        egui::CentralPanel::default().show(ui, |ui| {
            ui.heading("weightscope");
            match &self.device {
                Ok(device) => ui.label(device.describe()),
                Err(err) => ui.colored_label(ui.visuals().error_fg_color, format!("MLX: {err}")),
            };
            match &self.path {
                Some(path) => ui.label(format!("Checkpoint: {}", path.display())),
                None => ui.label("Checkpoint: the bundled demo"),
            };
        });
    }
}
