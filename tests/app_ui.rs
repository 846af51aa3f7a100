//! The window's behaviour, driven headlessly by accessibility label with
//! `egui_kittest`, on the real MLX worker and real files.

mod common;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use weightscope::app::{Action, WeightscopeApp};
use weightscope::mlx;
use weightscope::weights::demo;

fn harness(app: WeightscopeApp) -> Harness<'static, WeightscopeApp> {
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 860.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), app);
    harness.run();
    harness
}

fn open_app(path: &std::path::Path) -> WeightscopeApp {
    let mut app = WeightscopeApp::new(
        Some(path.to_path_buf()),
        mlx::default_device().map_err(|e| e.to_string()),
        || {},
    )
    .expect("worker");
    app.wait_for_worker().expect("opened");
    app
}

#[test]
fn browse_the_demo_filter_materialize_and_release() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut harness = harness(open_app(&demo));
    assert_eq!(
        harness.state().checkpoint().map(|c| c.tensors().len()),
        Some(10)
    );
    harness.get_by_label_contains("10 of 10 tensors");
    harness.get_by_label_contains("lm_head.weight");

    // Grouped by layer: one group per layer number, names inside when opened.
    harness.get_by_label("Group by layer").click();
    harness.run();
    harness.get_by_label_contains("layer 0: 7 tensors");
    harness
        .get_by_label_contains("not in a layer: 3 tensors")
        .click();
    harness.run();
    harness.get_by_label_contains("lm_head.weight");
    harness.get_by_label("Group by layer").click();
    harness.run();

    // Filter.
    harness.get_by_label("Filter").focus();
    harness.run();
    harness.get_by_label("Filter").type_text("up_proj");
    harness.run();
    harness.get_by_label_contains("3 of 10 tensors");
    assert!(harness.query_by_label_contains("lm_head.weight").is_none());

    // A regex instead of a substring: a bad one is explained, the rows stay.
    harness.get_by_label("Regex").click();
    harness.run();
    harness.get_by_label_contains("3 of 10 tensors");
    harness.get_by_label("Filter").focus();
    harness.run();
    harness.get_by_label("Filter").type_text("(");
    harness.run();
    harness.get_by_label_contains("regex:");
    harness.get_by_label_contains("3 of 10 tensors");
    harness
        .state_mut()
        .set_filter("^model\\.layers\\.0\\.mlp\\.(up|down)_proj\\.weight$");
    harness.run();
    harness.get_by_label_contains("2 of 10 tensors");
    harness.state_mut().set_filter("up_proj");
    harness.run();

    // Click the quantized weight: materialized on the worker, shown dequantized.
    harness.get_by_label_contains("mlp.up_proj.weight").click();
    // One frame at a time while the spinner spins (it keeps asking for repaints).
    harness.step();
    harness.step();
    harness.get_by_label_contains("materializing");
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    harness.get_by_label("min");
    harness.get_by_label("NaN");
    harness.get_by_label_contains("4-bit quantized (group 64)");
    harness.get_by_label_contains("materialized 64.00 KiB");

    // Release its shard: the state says so.
    // One button per shard, in shard order: the second shard holds up_proj.
    harness
        .get_all_by_label("Release shard")
        .nth(1)
        .expect("a button per shard")
        .click();
    harness.run();
    harness.state_mut().wait_for_worker().expect("released");
    harness.run();
    harness.get_by_label("released");

    // The memory strip: live figures, and the last event named.
    assert!(harness.state_mut().wait_for_sample());
    harness.run();
    harness.get_by_label_contains("Memory (MiB, seconds since start): process RSS");
    harness.get_by_label_contains("release shard model-00002-of-00003.safetensors");
}

#[test]
fn a_corrupt_shard_is_shown_and_the_rest_stays_browsable() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    common::write_safetensors(
        &dir.path().join("a.safetensors"),
        &[common::Tensor::f32("good", &[2], &[1.0, 2.0])],
    );
    std::fs::write(
        dir.path().join("b.safetensors"),
        b"\x04\x00\x00\x00\x00\x00\x00\x00oops",
    )
    .expect("write");
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label_contains("header is not JSON");
    harness.get_by_label_contains("1 of 1 tensors");
    harness.get_by_label_contains("good").click();
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    harness.get_by_label("mean");
}

#[test]
fn a_path_that_cannot_open_says_why_and_another_can_be_typed() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = harness(open_app(&dir.path().join("missing")));
    harness.get_by_label_contains("cannot read");
    common::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[common::Tensor::f32("x", &[1], &[3.0])],
    );
    harness.get_by_label("Checkpoint path").focus();
    harness.run();
    let field_path = dir.path().join("m.safetensors");
    harness.state_mut().open(field_path);
    harness.state_mut().wait_for_worker().expect("opened");
    harness.run();
    harness.get_by_label_contains("1 of 1 tensors");
    assert!(harness.query_by_label_contains("cannot read").is_none());

    // The dialogs are the shell's job: the UI asks, and explains an empty answer.
    harness.get_by_label("Open checkpoint…").click();
    harness.run();
    assert_eq!(harness.state_mut().take_actions(), [Action::PickFolder]);
    harness.state_mut().picked(None);
    harness.run();
    harness.get_by_label_contains("type the path above or drop a folder");
    // What opened is remembered for the Recent menu (saved by the shell).
    let recent = harness
        .state_mut()
        .take_changed_settings()
        .map(|s| s.recent.clone());
    assert_eq!(
        recent.and_then(|r| r.first().cloned()),
        Some(dir.path().join("m.safetensors"))
    );
}
