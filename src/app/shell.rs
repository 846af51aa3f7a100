//! The eframe edge: the native window, draining worker events in `logic`, and
//! the frame counter the CI smoke run reads (`WEIGHTSCOPE_EXIT_AFTER_FRAMES`).

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use super::settings::Settings;
use super::{Dialog, WeightscopeApp};
use crate::mlx::DeviceInfo;

/// Mesa's software OpenGL (llvmpipe) draws each frame on as many threads
/// as the machine has cores; a frame of this window costs it ~0.1 s of CPU
/// at 1400x900. On a small machine those bursts take the cores from the
/// job being recorded (a job recorded from the window ran 1.44x as long as
/// under the CLI on 2 cores; with one drawing thread, 1.02x). So the
/// window draws on a quarter of the cores (at least one), unless
/// `LP_NUM_THREADS` says otherwise; jobs it records never see the
/// variable. No other OpenGL driver reads it.
///
/// # Safety
/// Sets an environment variable: call it before the process has any other
/// thread.
#[allow(unsafe_code)]
pub unsafe fn prepare_window_process() {
    const VAR: &str = "LP_NUM_THREADS";
    if crate::environment::started_with(VAR).is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    // SAFETY: passed on from the caller.
    unsafe { std::env::set_var(VAR, (cores / 4).max(1).to_string()) };
    crate::profile::capture::keep_from_jobs(vec![VAR]);
}

/// Wraps [`WeightscopeApp`] for eframe.
pub struct Shell {
    app: WeightscopeApp,
    frames: u64,
    exit_after_frames: Option<u64>,
    settings_path: Option<PathBuf>,
    /// Answers of file dialogs, which run on their own threads (rfd blocks).
    picked_tx: Sender<(Dialog, Vec<PathBuf>)>,
    picked_rx: Receiver<(Dialog, Vec<PathBuf>)>,
    /// When the process started, and when the first frame and the first frame
    /// with the checkpoint open were drawn (reported by the smoke run).
    launched: Instant,
    first_frame: Option<Duration>,
    first_open_frame: Option<Duration>,
}

impl Shell {
    fn perform(&self, action: Dialog, ctx: &egui::Context) {
        let ctx = ctx.clone();
        let wake: super::background::Wake = std::sync::Arc::new(move || ctx.request_repaint());
        let started = super::background::spawn_into(
            "file-dialog",
            self.picked_tx.clone(),
            wake,
            move |send| {
                let dialog = rfd::FileDialog::new();
                let picked = match action {
                    Dialog::PickFolder => dialog
                        .set_title("Open checkpoint")
                        .pick_folder()
                        .map(|p| vec![p]),
                    Dialog::PickDiffFolder => dialog
                        .set_title("Checkpoint to compare with")
                        .pick_folder()
                        .map(|p| vec![p]),
                    Dialog::PickFile => dialog
                        .set_title("Open checkpoint")
                        .add_filter("safetensors", &["safetensors"])
                        .pick_file()
                        .map(|p| vec![p]),
                    Dialog::SaveTrace => dialog
                        .set_title("Save trace")
                        .add_filter("JSON trace", &["json"])
                        .add_filter("CSV trace", &["csv"])
                        .set_file_name("weightscope-trace.json")
                        .save_file()
                        .map(|p| vec![p]),
                    Dialog::ExportTrace(format) => {
                        use crate::profile::export::Format;
                        let (kind, extension, name) = match format {
                            Format::Perfetto => {
                                ("Trace Event JSON", "json", "weightscope.perfetto.json")
                            }
                            Format::Speedscope => {
                                ("speedscope", "json", "weightscope.speedscope.json")
                            }
                            Format::Folded => ("folded stacks", "txt", "weightscope.folded.txt"),
                        };
                        dialog
                            .set_title(format!("Export trace ({})", format.name()))
                            .add_filter(kind, &[extension])
                            .set_file_name(name)
                            .save_file()
                            .map(|p| vec![p])
                    }
                    // Several journals of one job's hosts open merged.
                    Dialog::OpenTrace => dialog
                        .set_title("Open traces (several journals of one job merge)")
                        .add_filter("trace", &["json", "csv", "jsonl"])
                        .pick_files(),
                };
                send((action, picked.unwrap_or_default()));
            },
        );
        if started.is_err() {
            let _ = self.picked_tx.send((action, Vec::new()));
        }
    }
}

impl eframe::App for Shell {
    // Closing the window stops the running walk, diff or scan before its
    // next tensor and skips queued ones, so the window closes at once.
    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        self.app.stop_jobs();
    }

    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        // At most ~10 ms of events per frame; the worker wakes us for more.
        self.app.drain_events(Duration::from_millis(10));
        for action in self.app.take_dialogs() {
            self.perform(action, ctx);
        }
        while let Ok((action, picked)) = self.picked_rx.try_recv() {
            self.app.picked_for(action, picked);
        }
        if let (Some(path), Some(settings)) =
            (&self.settings_path, self.app.take_changed_settings())
        {
            // A few hundred bytes when a checkpoint opens; failing to save is not fatal.
            if let Err(err) = settings.save(path) {
                crate::units::stderr_line(format_args!(
                    "cannot save settings to {}: {err}",
                    path.display()
                ));
            }
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.ui(ui);
        self.first_frame
            .get_or_insert_with(|| self.launched.elapsed());
        if self.app.checkpoint().is_some() {
            self.first_open_frame
                .get_or_insert_with(|| self.launched.elapsed());
        }
        // For the smoke run, frames count once the checkpoint is open (or
        // failed to), so the window is shown with its contents.
        if !self.app.is_opening() {
            self.frames += 1;
        }
        if let Some(limit) = self.exit_after_frames {
            if self.frames == limit {
                // Frame N's `ui` runs only after frame N-1 was painted, so
                // reaching N (>= 2) proves real frames reached the screen.
                let opened = self.app.checkpoint().map_or_else(
                    || "no checkpoint".to_owned(),
                    |c| format!("{} tensors", c.tensors().len()),
                );
                let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
                eprintln!(
                    "weightscope: rendered {} frames ({opened}); first frame {:.0} ms after start, \
                     with the checkpoint {:.0} ms",
                    self.frames - 1,
                    ms(self.first_frame),
                    ms(self.first_open_frame)
                );
                ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
            } else {
                ui.ctx().request_repaint();
            }
        }
    }
}

/// The window as the binary opens it: on `path`, or on the bundled demo
/// (written on first use) when `None`. Returns the exit status; a failure
/// is said in one line.
#[must_use]
pub fn main(path: Option<PathBuf>, launched: Instant) -> u8 {
    let path = match path {
        Some(path) => path,
        None => match crate::weights::demo::ensure_demo(&crate::weights::demo::demo_dir()) {
            Ok(dir) => dir,
            Err(err) => {
                crate::units::stderr_line(format_args!("{err}"));
                return 1;
            }
        },
    };
    let device = crate::mlx::default_device();
    if let Err(err) = run(Some(path), device, launched) {
        crate::units::stderr_line(format_args!("{err:#}"));
        return 1;
    }
    0
}

/// Opens the native window on `path` and runs until it closes.
///
/// # Errors
/// When no window can be opened (for example, no `DISPLAY`).
pub fn run(
    path: Option<PathBuf>,
    device: Result<DeviceInfo, crate::mlx::MlxError>,
    launched: Instant,
) -> anyhow::Result<()> {
    let exit_after_frames = crate::environment::get().exit_after_frames;
    // glow (OpenGL) first: under software rendering it draws a frame five
    // times faster than wgpu (docs/app.md); wgpu when no OpenGL context
    // can be made.
    let inputs = std::rc::Rc::new(std::cell::RefCell::new(Some((path, device))));
    let mut result = Ok(());
    for renderer in [eframe::Renderer::Glow, eframe::Renderer::Wgpu] {
        let Some(_) = inputs.borrow().as_ref() else {
            break;
        };
        let options = eframe::NativeOptions {
            viewport: egui::ViewportBuilder::default()
                .with_title("weightscope")
                .with_app_id("weightscope")
                .with_icon(window_icon())
                .with_inner_size([1400.0, 860.0])
                .with_min_inner_size([800.0, 500.0]),
            renderer,
            ..Default::default()
        };
        let inputs = std::rc::Rc::clone(&inputs);
        result = eframe::run_native(
            "weightscope",
            options,
            Box::new(move |cc| {
                let (path, device) = inputs.borrow_mut().take().ok_or("created twice")?;
                let ctx = cc.egui_ctx.clone();
                let mut app = WeightscopeApp::new(path, device, move || ctx.request_repaint())?;
                let settings_path = Settings::default_path();
                if let Some(file) = &settings_path {
                    app.set_settings(Settings::load(file));
                }
                let (picked_tx, picked_rx) = mpsc::channel();
                Ok(Box::new(Shell {
                    app,
                    frames: 0,
                    exit_after_frames,
                    settings_path,
                    picked_tx,
                    picked_rx,
                    launched,
                    first_frame: None,
                    first_open_frame: None,
                }))
            }),
        );
        if result.is_ok() {
            break;
        }
    }
    result.map_err(|e| {
        anyhow::anyhow!(
            "cannot open a window: {e} (is DISPLAY set? use `xvfb-run` on a machine without a display, or the `inspect` command)"
        )
    })
}

/// The window's icon, drawn here as `assets/weightscope.svg` draws it (a
/// histogram of weights in a dark tile), so the binary needs no image file.
fn window_icon() -> egui::IconData {
    const SIZE: usize = 64;
    let tile = [0x1e, 0x24, 0x30];
    let (blue, red) = ([0x5a, 0x96, 0xf0], [0xe6, 0x5a, 0x50]);
    // x, y, width, height, colour: the SVG's bars.
    let bars = [
        (12, 34, 8, 18, blue),
        (24, 18, 8, 34, blue),
        (36, 24, 8, 28, red),
        (48, 40, 6, 12, red),
    ];
    let mut rgba = vec![0u8; SIZE * SIZE * 4];
    for y in 0..SIZE {
        for x in 0..SIZE {
            // The tile: 2..62 with corners of radius 12.
            let inside = |v: usize| (2..62).contains(&v);
            let corner = |v: usize| {
                if v < 14 {
                    14 - v
                } else if v >= 50 {
                    v - 49
                } else {
                    0
                }
            };
            let (cx, cy) = (corner(x), corner(y));
            if !(inside(x) && inside(y)) || cx * cx + cy * cy > 144 {
                continue;
            }
            let colour = bars
                .iter()
                .find(|(bx, by, w, h, _)| (*bx..bx + w).contains(&x) && (*by..by + h).contains(&y))
                .map_or(tile, |bar| bar.4);
            let at = (y * SIZE + x) * 4;
            rgba[at..at + 3].copy_from_slice(&colour);
            rgba[at + 3] = 255;
        }
    }
    egui::IconData {
        rgba,
        width: 64,
        height: 64,
    }
}
