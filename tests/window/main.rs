//! The window: `egui_kittest` on the real worker and real files (panels,
//! image snapshots, hostile checkpoints opened in one window).
//!
//! One test binary per group (each links MLX and egui): `cargo test --test
//! window <module>::` runs one file's tests.

// `wait_while(h, |h| h.is_walking())`: the method itself (`Hooks::is_walking`)
// is not general over the hooks' lifetime, as the lint suggests it is.
#![allow(clippy::redundant_closure_for_method_calls)]

#[path = "../common/mod.rs"]
mod common;

/// The benchmarks' DeepSeek-V3-shaped layout (163 sparse shards, 90k
/// tensors), for snapshots of a large checkpoint.
#[path = "../../benches/common/mod.rs"]
mod layout;

mod app_ui;
mod hostile;
mod navigation;
mod pytorch;
mod recording;
mod recordings_list;
mod snapshots;

/// `app` in a harness `size` points big, its first frames run.
fn window_of(
    app: weightscope::app::WeightscopeApp,
    size: egui::Vec2,
) -> egui_kittest::Harness<'static, weightscope::app::WeightscopeApp> {
    let mut harness = egui_kittest::Harness::builder()
        .with_size(size)
        .build_ui_state(
            |ui, app: &mut weightscope::app::WeightscopeApp| app.ui(ui),
            app,
        );
    harness.run();
    harness
}

/// The window on the checkpoint at `path` (opened), `size` points big.
fn window_on(
    path: &std::path::Path,
    size: egui::Vec2,
) -> egui_kittest::Harness<'static, weightscope::app::WeightscopeApp> {
    let mut app = weightscope::app::WeightscopeApp::new(
        Some(path.to_path_buf()),
        weightscope::mlx::default_device(),
        || {},
    )
    .expect("worker");
    app.hooks().wait_for_worker().expect("opened");
    window_of(app, size)
}

/// The app's test hooks, through the harness that holds it.
fn hooks<'h>(
    harness: &'h mut egui_kittest::Harness<'_, weightscope::app::WeightscopeApp>,
) -> weightscope::app::Hooks<'h> {
    harness.state_mut().hooks()
}

/// Applies the worker's events for as long as `busy` says the app waits
/// on it (a walk, a diff, a preview).
fn wait_while(
    harness: &mut egui_kittest::Harness<'_, weightscope::app::WeightscopeApp>,
    busy: impl Fn(&weightscope::app::Hooks<'_>) -> bool,
) {
    while busy(&hooks(harness)) {
        hooks(harness)
            .wait_for_worker()
            .expect("the worker answers");
    }
}

/// A command line as a user types it into "Record a command…": each
/// part quoted for `sh -c`.
fn typed_line(parts: &[&std::ffi::OsStr]) -> String {
    parts
        .iter()
        .map(|p| shell_words::quote(&p.to_string_lossy()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Types `line` into the open "Record a command…" form and presses Start
/// (one frame stepped: the recording has begun).
fn start_in_form(
    harness: &mut egui_kittest::Harness<'static, weightscope::app::WeightscopeApp>,
    line: &str,
) {
    use egui_kittest::kittest::Queryable;
    harness.get_by_label("Command line (run by sh -c)").focus();
    harness.run();
    // Over what the form kept from the last recording.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Command line (run by sh -c)")
        .type_text(line);
    harness.run();
    harness.get_by_label("Start").click();
    harness.step();
}

/// Records `line` as a user does ("Record a command…", the line typed,
/// Start) and returns once the recording has ended.
fn record_in_window(
    harness: &mut egui_kittest::Harness<'static, weightscope::app::WeightscopeApp>,
    line: &str,
) {
    use egui_kittest::kittest::Queryable;
    harness.get_by_label("Record a command…").click();
    harness.run();
    start_in_form(harness, line);
    assert!(hooks(harness).wait_for_recording(), "a recording ran");
    harness.run();
}
