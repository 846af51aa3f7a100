//! The eframe edge: the native window, and the frame counter the CI smoke run
//! reads (`WEIGHTSCOPE_EXIT_AFTER_FRAMES`).

use super::WeightscopeApp;

/// Wraps [`WeightscopeApp`] for eframe.
pub struct Shell {
    app: WeightscopeApp,
    frames: u64,
    exit_after_frames: Option<u64>,
}

impl Shell {
    /// A shell that closes the window after `exit_after_frames` frames, if set.
    #[must_use]
    pub fn new(app: WeightscopeApp, exit_after_frames: Option<u64>) -> Self {
        Self {
            app,
            frames: 0,
            exit_after_frames,
        }
    }

    /// How many frames were drawn.
    #[must_use]
    pub fn frames(&self) -> u64 {
        self.frames
    }
}

impl eframe::App for Shell {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.ui(ui);
        self.frames += 1;
        if let Some(limit) = self.exit_after_frames {
            if self.frames == limit {
                // Frame N's `ui` runs only after frame N-1 was painted, so
                // reaching N (>= 2) proves real frames reached the screen.
                eprintln!("weightscope: rendered {} frames", self.frames - 1);
                ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
            } else {
                ui.ctx().request_repaint();
            }
        }
    }
}

/// Opens the native window and runs until it closes.
///
/// # Errors
/// When no window can be opened (for example, no `DISPLAY`).
pub fn run(app: WeightscopeApp) -> anyhow::Result<()> {
    let exit_after_frames = std::env::var("WEIGHTSCOPE_EXIT_AFTER_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok());
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("weightscope")
            .with_inner_size([1200.0, 760.0]),
        ..Default::default()
    };
    eframe::run_native(
        "weightscope",
        options,
        Box::new(move |_cc| Ok(Box::new(Shell::new(app, exit_after_frames)))),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "cannot open a window: {e} (is DISPLAY set? use `xvfb-run` on a machine without a display, or the `inspect` command)"
        )
    })
}
