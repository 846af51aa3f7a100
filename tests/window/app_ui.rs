//! The window's behaviour, driven headlessly by accessibility label with
//! `egui_kittest`, on the real MLX worker and real files.

use crate::common;

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use weightscope::app::{AppCommand, Dialog, Tab, WeightscopeApp};
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
    let mut app = WeightscopeApp::new(Some(path.to_path_buf()), mlx::default_device(), || {})
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
    harness.get_by_label_contains("8 of 10 tensors (2 scales folded)");
    harness.get_by_label_contains("lm_head.weight");
    // Logical parameters and bits per weight of the quantized layer, in the status bar.
    harness.get_by_label_contains("(affine 4-bit; 14.35 bits/weight)");

    // Grouped by layer: one group per layer number, names inside when opened.
    harness.get_by_label("Group by layer").click();
    harness.run();
    harness.get_by_label_contains("layer 0: 5 tensors");
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
    harness.get_by_label_contains("1 of 10 tensors");
    assert!(harness.query_by_label_contains("lm_head.weight").is_none());

    // A regex instead of a substring: a bad one is explained, the rows stay.
    harness.get_by_label("Regex").click();
    harness.run();
    harness.get_by_label_contains("1 of 10 tensors");
    harness.get_by_label("Filter").focus();
    harness.run();
    harness.get_by_label("Filter").type_text("(");
    harness.run();
    harness.get_by_label_contains("regex:");
    harness.get_by_label_contains("1 of 10 tensors");
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
    harness.get_by_label_contains("MLX affine 4-bit, group 64 (scales and biases)");
    // The packed weight with its scales and biases: 64 + 8 + 8 KiB.
    harness.get_by_label_contains("materialized 80.00 KiB");
    // A second click is served from the cache and adds nothing.
    harness.state_mut().execute(AppCommand::Materialize(
        "model.layers.0.mlp.up_proj.weight".into(),
    ));
    harness.step();
    harness
        .state_mut()
        .wait_for_worker()
        .expect("materialized again");
    harness.run();
    harness.get_by_label_contains("materialized 80.00 KiB");

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
    harness.get_by_label_contains("release-shard model-00002-of-00003.safetensors");
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
    // Said once (#58: error lines piled up): the centre says nothing is
    // open, and why.
    assert_eq!(
        harness.query_all_by_label_contains("cannot read").count(),
        1
    );
    harness.get_by_label_contains("Nothing is open: ");
    common::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[common::Tensor::f32("x", &[1], &[3.0])],
    );
    harness.get_by_label("Checkpoint path").focus();
    harness.run();
    let field_path = dir.path().join("m.safetensors");
    harness.state_mut().execute(AppCommand::Open(field_path));
    harness.state_mut().wait_for_worker().expect("opened");
    harness.run();
    harness.get_by_label_contains("1 of 1 tensors");
    assert!(harness.query_by_label_contains("cannot read").is_none());
    // A file that is not a checkpoint: the open checkpoint stays, and the
    // status bar says the open failed beside its badge.
    let passwd = dir.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/sh\n").expect("write");
    harness.state_mut().execute(AppCommand::Open(passwd));
    while harness.state().is_opening() {
        harness
            .state_mut()
            .wait_for_any_event()
            .expect("the worker answers");
    }
    harness.run();
    harness.get_by_label_contains("open failed: ");
    assert_eq!(
        harness.query_all_by_label_contains("open failed").count(),
        1
    );
    harness.get_by_label_contains("1 of 1 tensors");
    // The path field shows what is open, not the path that failed.
    assert_eq!(
        harness.state().path_input(),
        dir.path().join("m.safetensors").display().to_string()
    );

    // The dialogs are the shell's job: the UI asks, and explains an empty answer.
    harness.get_by_label("Open checkpoint…").click();
    harness.run();
    assert_eq!(harness.state_mut().take_dialogs(), [Dialog::PickFolder]);
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

/// 8 shards of two 1 MiB f32 tensors each.
fn write_eight_shards(dir: &std::path::Path) {
    let values: Vec<f32> = (0..256 * 1024).map(|i| (i % 13) as f32).collect();
    for shard in 0..8 {
        let tensors: Vec<common::Tensor> = (0..2)
            .map(|i| {
                common::Tensor::f32(&format!("model.layers.{shard}.w{i}"), &[256, 1024], &values)
            })
            .collect();
        common::write_safetensors(&dir.join(format!("model-{shard}.safetensors")), &tensors);
    }
}

fn finish_walk(harness: &mut Harness<'static, WeightscopeApp>) {
    while harness.state().is_walking() {
        harness.state_mut().wait_for_worker().expect("walk events");
    }
    harness.run();
}

/// Saves the trace through the path field; saving again asks before
/// replacing it, and a path inside `checkpoint` is refused.
fn save_by_path(
    harness: &mut Harness<'static, WeightscopeApp>,
    path: &std::path::Path,
    checkpoint: &std::path::Path,
) {
    harness.get_by_label("Trace path").focus();
    harness.run();
    harness
        .get_by_label("Trace path")
        .type_text(&path.display().to_string());
    harness.run();
    harness.get_by_label("Save to path").click();
    harness.run();
    harness.get_by_label_contains("trace saved to");
    // The same path again: the panel asks before replacing the file.
    std::fs::write(path, "not yet replaced").expect("write");
    harness.get_by_label("Save to path").click();
    harness.run();
    harness.get_by_label_contains("exists: replace it?");
    assert_eq!(
        std::fs::read_to_string(path).expect("read"),
        "not yet replaced"
    );
    harness.get_by_label("Replace").click();
    harness.run();
    harness.get_by_label_contains("trace saved to");
    // A path inside the open checkpoint is refused, and nothing is written.
    let inside = checkpoint.join("trace.json");
    harness
        .get_by_label("Trace path")
        .set_text_value_accesskit(&inside.display().to_string());
    harness.run();
    harness.get_by_label("Save to path").click();
    harness.run();
    harness.get_by_label_contains("inside the checkpoint being read");
    assert!(!inside.exists());
    harness
        .get_by_label("Trace path")
        .set_text_value_accesskit(&path.display().to_string());
    harness.run();
}

#[test]
fn the_profiler_walks_finds_the_trap_and_keeps_the_trace() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_eight_shards(dir.path());
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label("Profiler").click();
    harness.run();
    assert_eq!(harness.state().tab(), Tab::Profiler);
    harness.get_by_label_contains("A release-shard walk needs about 2.00 MiB");

    // The trap: release-tensor with the maps alive.
    harness.get_by_label("Policy").click();
    harness.run();
    harness.get_by_label("release-tensor").click();
    harness.run();
    harness.get_by_label_contains("expected peak: 16.00 MiB");
    harness.get_by_label("Run walk").click();
    harness.step();
    harness.step();
    harness.get_by_label("Cancel walk");
    harness.get_by_label_contains("walking release-tensor");
    finish_walk(&mut harness);
    let (outcome, findings) = harness.state().last_walk().expect("a finished walk");
    assert_eq!(outcome.steps_done, 16);
    assert!(
        outcome.peak_mlx_active_bytes >= 15 << 20,
        "{}",
        outcome.peak_mlx_active_bytes
    );
    assert!(!findings.is_empty());
    harness.get_by_label_contains("did not lower MLX active memory: the shard map still holds it");
    harness.get_by_label("Run walk");

    // Click the last release in the events table: the moment is selected and
    // the resident list shows the released tensors still held by their maps.
    harness
        .get_all_by_label_contains("release model.layers.7.w1")
        .last()
        .expect("the last release is listed")
        .click();
    harness.run();
    assert!(harness.state().selected_moment().is_some());
    harness.get_by_label_contains("s: 16.00 MiB in 8 shards");
    harness
        .get_by_label_contains("model-0.safetensors: 2.00 MiB (2 tensors)")
        .click();
    harness.run();
    assert_eq!(
        harness
            .get_all_by_label_contains("(released, still held by the shard map)")
            .count(),
        2
    );

    // Save the walk's trace by path, then overlay it.
    let out = tempfile::tempdir().expect("tempdir");
    let path = out.path().join("trap.csv");
    save_by_path(&mut harness, &path, dir.path());
    let saved = weightscope::profile::Trace::load(&path).expect("the saved trace loads");
    assert_eq!(
        saved.policy,
        Some(weightscope::memory::Policy::ReleaseTensor)
    );
    harness.get_by_label("Open from path").click();
    harness.step();
    // The trace loads on its own thread; the frames go on meanwhile.
    harness.state_mut().wait_for_trace();
    harness.run();
    harness.get_by_label_contains("x release-tensor none");

    // The fix, overlaid on the trap: no trap finding this time.
    harness.get_by_label("Policy").click();
    harness.run();
    harness.get_by_label("release-shard").click();
    harness.run();
    harness.get_by_label("Run walk").click();
    harness.step();
    finish_walk(&mut harness);
    let (outcome, findings) = harness.state().last_walk().expect("a finished walk");
    assert!(outcome.peak_mlx_active_bytes <= (2 << 20) + (2 << 20) / 10);
    assert!(
        findings.iter().all(
            |f| f.kind != weightscope::profile::FindingKind::ReleaseFreedNothing
                && f.kind != weightscope::profile::FindingKind::RssDidNotFollow
        ),
        "{findings:?}"
    );
    assert!(
        harness
            .query_by_label_contains("did not lower MLX active memory")
            .is_none()
    );

    // Dialog actions go to the shell; an empty answer is explained.
    harness.get_by_label("Save trace…").click();
    harness.run();
    assert_eq!(harness.state_mut().take_dialogs(), [Dialog::SaveTrace]);
    harness
        .state_mut()
        .picked_for(Dialog::SaveTrace, Vec::new());
    harness.run();
    harness.get_by_label_contains("No file was chosen");

    // A bad limit is explained; a good one reaches MLX.
    harness.get_by_label("MLX memory limit").focus();
    harness.run();
    harness.get_by_label("MLX memory limit").type_text("lots");
    harness.run();
    harness.get_by_label("Set limit").click();
    harness.run();
    harness.get_by_label_contains("the memory limit is a size");
}

/// Runs on every backend: on the CPU here and in CI, on CUDA on the GPU
/// machine (docs/gpu.md), where the labels must say GPU memory.
#[test]
fn the_device_and_memory_series_are_labelled_for_the_backend() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let values: Vec<f32> = (0..64 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
    common::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[common::Tensor::f32("probe.weight", &[64, 64], &values)],
    );
    let device = mlx::default_device().expect("MLX reports its device");
    let gpu = device.kind == mlx::DeviceKind::Gpu;
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label_contains(&device.describe());
    harness.get_by_label_contains("probe.weight").click();
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    let shown = if gpu {
        format!("{} ({})", device.name(), mlx::GPU_BACKEND)
    } else {
        format!("{} (no GPU: CPU)", device.name())
    };
    harness.get_by_label(&shown);
    assert!(harness.state_mut().wait_for_sample());
    harness.run();
    let gpu_note = harness
        .query_by_label_contains("MLX figures are GPU memory")
        .is_some();
    assert_eq!(
        gpu_note, gpu,
        "the strip says RSS is host memory only on a GPU"
    );
    eprintln!("backend checked: {}", device.describe());
}

/// A Qwen3-Next-shaped source (as Hugging Face stores it) and its MLX conversion.
fn write_qwen_source_and_conversion(source: &std::path::Path, converted: &std::path::Path) {
    let save = |path: std::path::PathBuf, tensors: &[(&str, Vec<f32>, Vec<i32>)]| {
        let arrays: Vec<mlx::Array> = tensors
            .iter()
            .map(|(_, values, shape)| mlx::array_f32(values, shape))
            .collect();
        let pairs: Vec<(&str, &mlx::Array)> =
            tensors.iter().map(|t| t.0).zip(arrays.iter()).collect();
        mlx::save_safetensors(&path, &pairs).expect("MLX writes");
    };
    let head: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    save(
        source.join("model.safetensors"),
        &[
            (
                "model.language_model.layers.0.input_layernorm.weight",
                vec![0.25; 8],
                vec![8],
            ),
            ("mtp.fc.weight", vec![1.0; 4], vec![2, 2]),
            ("lm_head.weight", head.clone(), vec![8, 8]),
        ],
    );
    std::fs::write(
        source.join("config.json"),
        r#"{"model_type": "qwen3_next"}"#,
    )
    .expect("config");
    save(
        converted.join("model.safetensors"),
        &[
            (
                "model.layers.0.input_layernorm.weight",
                vec![1.25; 8],
                vec![8],
            ),
            ("lm_head.weight", head, vec![8, 8]),
        ],
    );
}

#[test]
fn views_show_both_names_the_drops_and_the_fix_up_and_the_diff_tab_compares() {
    let _lock = common::mlx_memory_lock();
    let source = tempfile::tempdir().expect("tempdir");
    let converted = tempfile::tempdir().expect("tempdir");
    write_qwen_source_and_conversion(source.path(), converted.path());
    let mut harness = harness(open_app(source.path()));
    assert_eq!(
        harness.state().view().map(|v| v.name.as_str()),
        Some("qwen3-next")
    );
    harness.get_by_label_contains("installed: qwen3-next");
    harness
        .get_by_label_contains("View qwen3-next: 1 renamed, 1 dropped, 2 fix-up rules")
        .click();
    harness.run();
    harness.get_by_label_contains("dropped mtp.fc.weight: multi-token-prediction head");
    harness.get_by_label_contains("2 of 3 tensors");
    // Canonical and stored names side by side.
    harness
        .get_by_label_contains(
            "model.layers.0.input_layernorm.weight  <-  model.language_model.layers.0.input_layernorm.weight",
        )
        .click();
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    harness.get_by_label_contains("Values shown after the view's fix-ups");
    // The rule, in the view summary and in the inspector.
    assert_eq!(
        harness
            .get_all_by_label_contains("stored as gamma - 1")
            .count(),
        2
    );
    harness.get_by_label("Before the fix-ups (as stored):");

    // Identity: stored names, nothing dropped.
    harness
        .state_mut()
        .set_view_choice(weightscope::weights::ViewChoice::Identity);
    harness.state_mut().wait_for_worker().expect("reopened");
    harness.run();
    assert!(harness.state().view().is_none());
    harness.get_by_label_contains("installed: none");
    harness.get_by_label_contains("3 of 3 tensors");

    // The converted checkpoint against the source through the view: equal.
    harness
        .state_mut()
        .execute(AppCommand::Open(converted.path().to_path_buf()));
    harness.state_mut().wait_for_worker().expect("opened");
    harness.run();
    harness.get_by_label("Diff").click();
    harness.run();
    harness.get_by_label("Compare with (B)").focus();
    harness.run();
    harness
        .get_by_label("Compare with (B)")
        .type_text(&source.path().display().to_string());
    harness.run();
    harness.get_by_label("B's view").focus();
    harness.run();
    harness.get_by_label("B's view").type_text("qwen3-next");
    harness.run();
    harness.get_by_label("Run diff").click();
    harness.step();
    while harness.state().is_diffing() {
        harness.state_mut().wait_for_worker().expect("diff events");
    }
    harness.run();
    let report = harness.state().diff_report().expect("a report");
    assert_eq!(report.common.len(), 2);
    assert_eq!(report.differing().count(), 0);
    assert!(report.only_in_a.is_empty() && report.only_in_b.is_empty());
    harness.get_by_label_contains("2 compared, 0 differ");
    harness.get_by_label_contains("lm_head.weight");
    harness.get_by_label_contains("Overall: no tensor changed; ");

    // A B with a corrupt shard is an error in the tab, not an empty checkpoint.
    let corrupt = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        corrupt.path().join("model.safetensors"),
        b"\x10\0\0\0\0\0\0\0{not json",
    )
    .expect("write");
    harness.get_by_label("Compare with (B)").focus();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Compare with (B)")
        .type_text(&corrupt.path().display().to_string());
    harness.run();
    harness.get_by_label("Run diff").click();
    harness.step();
    while harness.state().is_diffing() {
        harness.state_mut().wait_for_worker().expect("diff events");
    }
    harness.run();
    assert!(
        harness.state().diff_report().is_none(),
        "no report from a corrupt B"
    );
    let bad_shard = corrupt.path().join("model.safetensors");
    harness.get_by_label_contains(&format!("{}", bad_shard.display()));
}

#[test]
fn the_check_tab_lists_findings_selects_their_tensor_and_reads_values() {
    use common::convert::{Recipe, convert_with};
    use weightscope::checkpoint::QuantMode;
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let affine = Recipe::of(QuantMode::Affine, 4);
    // Missing biases (an error in the headers) and a NaN in a norm (found
    // only when the values are read).
    convert_with(
        dir.path(),
        affine,
        |_| Some(affine),
        true,
        |stored, _| {
            stored.retain(|(n, _)| n != "model.layers.0.mlp.up_proj.biases");
            let norm = stored
                .iter_mut()
                .find(|(n, _)| n == "model.norm.weight")
                .expect("norm");
            let mut values = mlx::to_f32_vec(&norm.1).expect("values");
            values[1] = f32::NAN;
            norm.1 = mlx::array_f32(&values, &[128]);
        },
    );
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label("check: 1 error, 0 warnings").click();
    harness.run();
    assert_eq!(harness.state().tab(), Tab::Check);
    harness.get_by_label_contains("quant.missing-biases");
    harness.get_by_label_contains("affine weight `model.layers.0.mlp.up_proj.weight` has no");

    // The values: the NaN is found, the badge counts it.
    harness.get_by_label("Read values").click();
    harness.step();
    while harness.state().is_checking_values() {
        harness.state_mut().wait_for_worker().expect("scan events");
    }
    harness.run();
    harness.get_by_label_contains("values.nan");
    // The layer without biases cannot be dequantized either: a third error.
    harness.get_by_label_contains("values.unreadable");
    harness.get_by_label("check: 3 errors, 0 warnings");
    harness.get_by_label_contains("tensors read (1 could not be read); peak MLX active");

    // Cancel in the window: until the worker's answer is drained the tab
    // shows the scan running with its Cancel button, whose click cancels
    // this scan's token (the worker honours it before the next tensor, or
    // before the scan starts; tests/mlx/check.rs covers both).
    harness.get_by_label("Read values").click();
    harness.step();
    harness.step();
    assert!(harness.state().is_checking_values());
    harness.get_by_label("Cancel").click();
    harness.step();
    assert!(harness.state().value_scan_cancel_requested());
    while harness.state().is_checking_values() {
        harness.state_mut().wait_for_worker().expect("scan events");
    }
    harness.run();

    // A row selects its tensor and opens it in the inspector.
    harness
        .get_all_by_label("model.layers.0.mlp.up_proj.weight")
        .next()
        .expect("a row naming the tensor")
        .click();
    harness.step();
    assert_eq!(harness.state().tab(), Tab::Tensors);
    harness.state_mut().wait_for_worker().expect("answered");
    harness.run();
    // Its values cannot be shown, and the inspector says why.
    harness.get_by_label_contains("affine quantization needs biases");
}

#[test]
fn enter_in_the_path_field_only_opens_and_a_failed_open_keeps_the_open_checkpoint() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut harness = harness(open_app(&demo));
    // Materialize one row, then move to the next with the keyboard (its
    // preview shows it once the selection rests).
    harness.get_by_label_contains("lm_head.weight").click();
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    harness.key_press(egui::Key::ArrowDown);
    let previewed = settle_preview(&mut harness).expect("previewed");
    assert_ne!(previewed, "lm_head.weight");

    // A wrong path typed and entered: an error, and the open checkpoint
    // still works (its rows, its tensors).
    harness.get_by_label("Checkpoint path").focus();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Checkpoint path")
        .type_text("/nonexistent/model");
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.step();
    harness.state_mut().wait_for_worker().expect("answered");
    harness.run();
    assert!(
        harness
            .query_all_by_label_contains("/nonexistent/model")
            .next()
            .is_some()
    );
    assert_eq!(
        harness.state().checkpoint().map(|c| c.tensors().len()),
        Some(10),
        "the open checkpoint stays"
    );
    // The Enter was the path field's: the selected row was not
    // materialized again.
    assert_eq!(harness.state().inspected_name(), Some(previewed.as_str()));
    assert!(!harness.state().is_materializing());
    harness.get_by_label_contains("lm_head.weight").click();
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    assert!(
        harness
            .query_by_label_contains("no checkpoint is open")
            .is_none()
    );
    harness.get_by_label_contains("min");
}

/// A tensor of the same name in another checkpoint gets its own heatmap: the
/// textures are keyed by preview, and opening a checkpoint drops the old ones.
#[test]
fn a_new_checkpoint_never_shows_an_old_heatmap() {
    let _lock = common::mlx_memory_lock();
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let values = |scale: f32| -> Vec<f32> { (0..64).map(|i| i as f32 * scale).collect() };
    common::write_safetensors(
        &a.path().join("model.safetensors"),
        &[common::Tensor::f32("w", &[8, 8], &values(1.0))],
    );
    common::write_safetensors(
        &b.path().join("model.safetensors"),
        &[common::Tensor::f32("w", &[8, 8], &values(-2.0))],
    );
    let mut harness = harness(open_app(a.path()));
    harness
        .state_mut()
        .execute(AppCommand::Materialize("w".into()));
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    let first = harness.state().heatmap_keys();
    assert_eq!(first.len(), 1, "{first:?}");

    harness
        .state_mut()
        .execute(AppCommand::Open(b.path().to_path_buf()));
    harness.state_mut().wait_for_worker().expect("opened");
    harness.run();
    assert!(harness.state().heatmap_keys().is_empty(), "dropped on open");
    harness
        .state_mut()
        .execute(AppCommand::Materialize("w".into()));
    harness.step();
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    let second = harness.state().heatmap_keys();
    assert_eq!(second.len(), 1);
    assert_ne!(first, second, "a new texture for the new values");
    harness.get_by_label_contains("-1.260000e2");
}

/// The profiler's "Record a command…": a Python MLX job that keeps every
/// array, recorded live on the recorder thread, its findings in the tab, its
/// recording a trace like a walk's; a bad form says why.
#[test]
#[allow(clippy::too_many_lines)] // one scripted session, read top to bottom
fn the_profiler_records_a_users_job_and_shows_what_it_did() {
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("mlx-glue/test-venv/bin/python");
    assert!(python.exists(), "run `mlx-glue/setup test` first");
    let jobs = root.join("tests/record/jobs.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = dir.path().join("job-checkpoint");
    let made = std::process::Command::new(&python)
        .arg(&jobs)
        .arg("make")
        .arg(&checkpoint)
        .arg("4")
        .status()
        .expect("python runs");
    assert!(made.success());
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();

    // An empty command line: the form says why, nothing starts.
    harness.get_by_label("Record a command…").click();
    harness.run();
    harness.get_by_label("Start").click();
    harness.run();
    harness.get_by_label_contains("type the command to record");
    assert!(!harness.state().is_recording());
    // Esc closes the form; the button opens it again.
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(
        harness
            .query_by_label("Command line (run by sh -c)")
            .is_none()
    );
    harness.get_by_label("Record a command…").click();
    harness.run();

    let command = crate::typed_line(&[
        python.as_os_str(),
        jobs.as_os_str(),
        "keep".as_ref(),
        checkpoint.as_os_str(),
    ]);
    crate::start_in_form(&mut harness, &command);
    assert!(harness.state().is_recording());
    harness.step();
    harness.get_by_label_contains("recording `");
    harness.get_by_label("Stop");
    assert!(harness.state_mut().wait_for_recording());
    harness.run();
    assert!(!harness.state().is_recording());

    // What it did, in the tab: how it ended, its peaks, the finding.
    harness.get_by_label_contains("exit 0 after");
    harness.get_by_label_contains("peak MLX active");
    harness.get_by_label_contains("the tensors of every shard were kept");
    harness.get_by_label_contains("Shard files the job held open");
    harness.get_by_label_contains("events of the job");
    // The lines: the stack at the peak and the table, from the job's probe.
    harness.get_by_label_contains("At the peak: jobs.py:");
    assert!(
        !harness
            .query_all_by_label_contains(" in keep")
            .collect::<Vec<_>>()
            .is_empty(),
        "keep's lines in the table"
    );
    // A finding selects its moment (the peak): the job's stack then.
    harness
        .get_by_label_contains("the tensors of every shard were kept")
        .click();
    harness.run();
    harness.get_by_label_contains("The job's working stack then");
    harness.get_by_label_contains("files loaded by then (mx.load)");
    let (recording, findings) = harness.state().last_recording().expect("a recording");
    assert_eq!(
        recording.exit,
        Some(weightscope::profile::analysis::recording::JobExit::Code(0))
    );
    assert!(
        recording.probe.is_some(),
        "MLX counters from inside the job"
    );
    // The window's own open shards (MLX maps them without close-on-exec)
    // do not leak into the job: its checkpoint is its own.
    assert_eq!(
        recording.checkpoint.as_ref().map(|c| c.path.as_path()),
        Some(checkpoint.as_path())
    );
    assert!(
        recording
            .files_seen
            .iter()
            .all(|f| f.path.starts_with(&checkpoint)),
        "{:?}",
        recording.files_seen
    );
    assert!(
        findings
            .iter()
            .any(|f| f.kind == weightscope::profile::FindingKind::JobAccumulated)
    );

    // A recording is a trace like any other.
    let saved = dir.path().join("job.csv");
    harness.state_mut().execute(AppCommand::SaveTrace {
        path: saved.clone(),
        replace: true,
    });
    let trace = weightscope::profile::Trace::load(&saved).expect("saved trace loads");
    assert_eq!(trace.job.and_then(|j| j.exit_code), Some(0));

    // A command that cannot start: said in the tab, the window goes on.
    harness.get_by_label("Record a command…").click();
    harness.run();
    harness.get_by_label("Command line (run by sh -c)").focus();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Command line (run by sh -c)")
        .type_text("/nonexistent/convert --now");
    harness.run();
    harness.get_by_label("Start").click();
    harness.step();
    harness.state_mut().wait_for_recording();
    harness.run();
    // The shell says why, in the job's output pane; the job exited 127.
    harness.get_by_label_contains("exited with status 127");
    harness.get_by_label_contains("/nonexistent/convert: not found");

    // A line as a terminal runs it: `&&` and the job's own output.
    harness.get_by_label("Record a command…").click();
    harness.run();
    harness.get_by_label("Command line (run by sh -c)").focus();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Command line (run by sh -c)")
        .type_text("true && echo from-the-job && echo to-stderr >&2");
    harness.run();
    harness.get_by_label("Start").click();
    harness.step();
    harness.state_mut().wait_for_recording();
    harness.run();
    harness.get_by_label("from-the-job");
    harness.get_by_label("to-stderr");
    harness.get_by_label_contains("Output of the job (last 2 lines)");
}

/// "Attach to process…": a running process followed from outside until it
/// exits; a pid that is not a number is refused by the form.
#[test]
fn the_profiler_attaches_to_a_running_process() {
    use std::io::BufRead as _;
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("mlx-glue/test-venv/bin/python");
    let mut target = std::process::Command::new(&python)
        .arg(root.join("tests/record/jobs.py"))
        .arg("wait")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the target runs");
    let mut ready = String::new();
    std::io::BufReader::new(target.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready");
    assert_eq!(ready.trim(), "ready");
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    harness.get_by_label("Attach to process…").click();
    harness.run();
    harness.get_by_label("Process id").focus();
    harness.run();
    harness.get_by_label("Process id").type_text("forty-two");
    harness.run();
    harness.get_by_label("Attach").click();
    harness.run();
    harness.get_by_label_contains("`forty-two` is not a process id");
    harness.get_by_label("Process id").focus();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Process id")
        .type_text(&target.id().to_string());
    harness.run();
    // Measured against a checkpoint named in the form.
    let field = "Checkpoint (empty: the folder of the first shard the job opens)";
    harness.get_by_label(field).focus();
    harness.run();
    harness
        .get_by_label(field)
        .type_text(&demo.to_string_lossy());
    harness.run();
    harness.get_by_label("Attach").click();
    harness.step();
    assert!(harness.state().is_recording());
    assert!(harness.state_mut().wait_for_recording_started());
    // Closing its stdin ends the target; the recording follows it out.
    drop(target.stdin.take());
    assert!(target.wait().expect("ends").success());
    assert!(harness.state_mut().wait_for_recording());
    harness.run();
    let (recording, _) = harness.state().last_recording().expect("a recording");
    assert!(recording.attached);
    assert!(recording.exit.is_none());
    assert_eq!(
        recording.checkpoint.as_ref().map(|c| c.path.as_path()),
        Some(demo.as_path())
    );
    assert!(!recording.samples.is_empty());
    harness.get_by_label_contains("detached after");
}

#[test]
fn opening_many_shards_shows_progress_while_the_open_checkpoint_stays() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let many = dir.path().join("many");
    std::fs::create_dir_all(&many).expect("dir");
    for shard in 0..120 {
        common::write_safetensors(
            &many.join(format!("model-{shard:05}-of-00120.safetensors")),
            &[common::Tensor::f32(
                &format!("t{shard}"),
                &[2, 2],
                &[1.0; 4],
            )],
        );
    }
    let mut harness = harness(open_app(&demo));
    harness.state_mut().execute(AppCommand::Open(many.clone()));
    // Apply events one at a time until the first progress has arrived.
    while !harness.state_mut().wait_for_any_event().expect("event") {}
    assert!(harness.state().is_opening());
    harness.run_steps(2); // the spinner keeps repainting
    assert!(
        harness
            .query_all_by_label_contains(&format!("opening {}", many.display()))
            .next()
            .is_some()
    );
    assert!(
        harness.query_by_label_contains("/120").is_some(),
        "a progress bar counts the 120 shards"
    );
    // What was open stays open and browsable meanwhile.
    harness.get_by_label_contains("8 of 10 tensors");
    while harness.state().is_opening() {
        harness.state_mut().wait_for_any_event().expect("event");
    }
    harness.run();
    harness.get_by_label_contains("120 of 120 tensors");
    assert!(harness.query_by_label_contains("opening").is_none());
}

#[test]
fn a_trace_loads_off_the_ui_thread_and_a_bad_one_says_why() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(Tab::Profiler));
    harness.run();
    let bad = dir.path().join("nope.json");
    harness
        .state_mut()
        .execute(AppCommand::LoadTrace(bad.clone()));
    harness.step(); // frames go on while the thread reads
    harness.state_mut().wait_for_trace();
    harness.run();
    let message = format!("{}", bad.display());
    assert!(harness.query_by_label_contains(&message).is_some());
    assert!(harness.query_by_label_contains("loading").is_none());

    // A good one, before any walk of this session: drawn on its own clock.
    let good = dir.path().join("walk.json");
    let walked = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("walk")
        .arg(&demo)
        .args(["--policy", "release-shard", "--trace"])
        .arg(&good)
        .output()
        .expect("walk runs");
    assert!(walked.status.success());
    harness
        .state_mut()
        .execute(AppCommand::LoadTrace(good.clone()));
    harness.step();
    harness.state_mut().wait_for_trace();
    harness.run();
    harness.get_by_label_contains("overlaid release-shard");
    harness.get_by_label_contains("no walk or job has run in this session");
}

/// The window forks its jobs: the kernel's max-RSS figure for the child
/// counts the window's own pages until the exec, so a large window recording
/// `sleep` must still report the job's own memory, as the CLI does.
#[test]
fn a_job_recorded_from_a_large_window_reports_its_own_memory() {
    use weightscope::profile::capture::{JobSpec, Target};
    let _lock = common::mlx_memory_lock();
    // 256 MiB of this process touched: the window is large.
    let ballast = vec![1u8; 256 << 20];
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut app = open_app(&demo);
    app.execute(AppCommand::Record(
        Target::Spawn(JobSpec {
            argv: vec!["sleep".into(), "0.3".into()],
            ..JobSpec::default()
        }),
        None,
    ));
    assert!(app.wait_for_recording(), "the recording ran");
    let (recording, _) = app.last_recording().expect("a recording");
    assert!(
        recording.peak_rss_bytes < 64 << 20,
        "sleep's peak RSS is its own, not the window's {} MiB: {}",
        ballast.iter().map(|&b| u64::from(b)).sum::<u64>() >> 20,
        recording.peak_rss_bytes
    );
    assert!(recording.peak_rss_bytes > 0);
}

/// Saved recordings open as runs (a journal cut short too): their lines,
/// phases, icicle and memory by kind; the list of recordings compares one
/// with the shown one, the difference of their peaks by line.
#[test]
fn saved_recordings_open_as_runs_and_two_compare_by_line() {
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("mlx-glue/test-venv/bin/python");
    let jobs = root.join("tests/record/jobs.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let record = |mode: &str, trace: &std::path::Path| {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .args(["record", "--interval-ms", "10", "--trace"])
            .arg(trace)
            .arg("--")
            .arg(&python)
            .arg(&jobs)
            .arg(mode)
            // The thread job holds its memory until the journal shows a
            // probe sample of it (not for a fixed time).
            .args((mode == "thread").then_some(trace))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("weightscope runs");
        assert!(status.success(), "{mode} recorded");
    };
    let thread = dir.path().join("thread.jsonl");
    let phases = dir.path().join("phases.json");
    record("thread", &thread);
    record("phases", &phases);
    // What a recorder killed mid-job leaves: the journal without its end.
    let text = std::fs::read_to_string(&thread).expect("journal");
    let cut = dir.path().join("cut.jsonl");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"record\":\"end\""))
        .collect();
    std::fs::write(&cut, kept.join("\n") + "\n").expect("write");

    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    // Tall enough that the side column's recordings list is on screen
    // (clicks land where a widget is drawn).
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 2400.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), open_app(&demo));
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    for path in [&cut, &phases] {
        harness
            .state_mut()
            .execute(AppCommand::LoadTrace(path.clone()));
        harness.state_mut().wait_for_trace();
        harness.run();
    }
    // The last opened is shown: its lines, phases, icicle.
    let (shown, _) = harness.state().last_recording().expect("a recording");
    assert_eq!(shown.lines[0].frame.function, "layers", "{:?}", shown.lines);
    harness.get_by_label_contains("By phase (between the job's marks)");
    harness.get_by_label_contains("Growth by stack (icicle)");
    harness.get_by_label("Recordings");
    assert!(
        harness
            .query_all_by_label_contains("cut short")
            .next()
            .is_some()
    );
    // Compare the first (the thread job, cut short) with the shown one.
    harness
        .get_all_by_label("compare")
        .next()
        .expect("a recording to compare")
        .click();
    harness.run();
    harness.get_by_label_contains("Peak of the compared");
    assert!(
        harness
            .query_all_by_label_contains(" in layers")
            .next()
            .is_some()
    );
    assert!(
        harness
            .query_all_by_label_contains(" in work")
            .next()
            .is_some(),
        "the worker thread's line, in the difference"
    );
    // Below the timeline: the memory by kind.
    harness.get_by_label("memory by kind").click();
    harness.run();
    harness.get_by_label_contains("Resident memory by kind");
    // Show the cut-short one: it is the run now, said cut short.
    harness.get_by_label("show").click();
    harness.run();
    let (shown, _) = harness.state().last_recording().expect("a recording");
    assert!(shown.cut_short);
    assert_eq!(shown.lines[0].frame.function, "work", "{:?}", shown.lines);
    harness.get_by_label_contains("cut short (the recorder stopped");
}

/// The keyboard: Ctrl+F and Ctrl+O select their field's text so that what
/// is typed replaces it; F1 lists the shortcuts and Esc closes the list; an
/// all-zero tensor says so under its histogram.
#[test]
fn keys_replace_field_text_f1_lists_shortcuts_and_zeros_are_said() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    common::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[
            common::Tensor::f32("zeros", &[2, 2], &[0.0; 4]),
            common::Tensor::f32("ones", &[2], &[1.0, 1.0]),
        ],
    );
    let mut harness = harness(open_app(&dir.path().join("m.safetensors")));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    harness.run();
    harness.get_by_label("Filter").type_text("ones");
    harness.run();
    harness.get_by_label_contains("1 of 2 tensors");
    // Ctrl+F again: the old text is selected, typing replaces it.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    harness.run();
    harness.get_by_label("Filter").type_text("zer");
    harness.run();
    assert_eq!(
        harness.get_by_label("Filter").value().as_deref(),
        Some("zer")
    );
    harness.get_by_label_contains("1 of 2 tensors");
    // Ctrl+O: the path field, its text selected.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::O);
    harness.run();
    harness
        .get_by_label("Checkpoint path")
        .type_text("/elsewhere");
    harness.run();
    assert_eq!(
        harness.get_by_label("Checkpoint path").value().as_deref(),
        Some("/elsewhere")
    );
    // F1 lists the shortcuts; Esc closes the list.
    harness.get_by_label("Filter").focus();
    harness.run();
    harness.key_press(egui::Key::F1);
    harness.run();
    harness.get_by_label("Keyboard shortcuts");
    harness.get_by_label_contains("the tensor filter, its text selected");
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(harness.query_by_label("Keyboard shortcuts").is_none());
    // An all-zero tensor: its histogram says so in words.
    harness
        .state_mut()
        .execute(AppCommand::Materialize("zeros".into()));
    harness.state_mut().wait_for_worker().expect("materialized");
    harness.run();
    harness.get_by_label_contains("All finite values are 0.");
}

/// Steps frames until the keyboard's preview has asked for a tensor, and
/// the worker has shown it; returns the inspector's tensor.
fn settle_preview(harness: &mut Harness<'static, WeightscopeApp>) -> Option<String> {
    // The key's frame, then one more: the preview waits for the selection
    // to rest, and each step is a quarter second of the harness's clock,
    // longer than that wait.
    harness.step();
    harness.step();
    while harness.state().is_materializing() {
        harness.state_mut().wait_for_worker().expect("materialized");
    }
    harness.run();
    harness.state().inspected_name().map(str::to_owned)
}

/// Five small tensors of different sizes, two in numbered layers.
fn five_tensors(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("m.safetensors");
    common::write_safetensors(
        &path,
        &[
            common::Tensor::f32("a.weight", &[2], &[1.0, 2.0]),
            common::Tensor::f32("b.weight", &[4, 4], &[0.5; 16]),
            common::Tensor::f32("c.bias", &[3], &[1.0, 2.0, 3.0]),
            common::Tensor::f32("layers.0.x", &[8], &[1.0; 8]),
            common::Tensor::f32("layers.1.y", &[2, 4], &[2.0; 8]),
        ],
    );
    path
}

#[test]
fn the_keyboard_drives_the_table() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = five_tensors(dir.path());
    let mut harness = harness(open_app(&path));
    // Keys typed in the same frame as Ctrl+F (a busy machine) reach the
    // filter: none is lost.
    harness.event(egui::Event::Key {
        key: egui::Key::F,
        physical_key: None,
        pressed: true,
        repeat: false,
        modifiers: egui::Modifiers::COMMAND,
    });
    harness.event(egui::Event::Text("c.b".into()));
    harness.run();
    assert_eq!(
        harness.get_by_label("Filter").value().as_deref(),
        Some("c.b")
    );
    harness.get_by_label_contains("1 of 5 tensors");
    // Ctrl+F, a filter, Down: into the table, and the first match shows.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    harness.run();
    harness.get_by_label("Filter").type_text("weight");
    harness.run();
    harness.get_by_label_contains("2 of 5 tensors");
    harness.key_press(egui::Key::ArrowDown);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("a.weight"));
    assert_eq!(harness.state().selected_tensor(), Some("a.weight"));
    // Down past the end stays on the last match; End and Home too.
    for _ in 0..4 {
        harness.key_press(egui::Key::ArrowDown);
    }
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("b.weight"));
    harness.key_press(egui::Key::Home);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("a.weight"));
    harness.key_press(egui::Key::PageDown);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("b.weight"));
    // A filter that hides the selected row: Enter in the table shows
    // nothing hidden; Enter in the filter shows its first match.
    harness.state_mut().set_filter("layers");
    harness.run();
    assert_eq!(
        harness.state().selected_tensor(),
        None,
        "the hidden row is not selected"
    );
    harness.key_press(egui::Key::Enter);
    harness.run();
    assert_eq!(harness.state().inspected_name(), Some("b.weight"));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    harness.run();
    harness.get_by_label("Filter").type_text("layers.1");
    harness.run();
    harness.key_press(egui::Key::Enter);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("layers.1.y"));
    // Ctrl+C copies the selected tensor's name.
    harness.event(egui::Event::Copy);
    harness.step();
    let copied = harness
        .output()
        .platform_output
        .commands
        .iter()
        .any(|c| matches!(c, egui::OutputCommand::CopyText(text) if text == "layers.1.y"));
    assert!(copied, "Ctrl+C copies the name");
    // A click on the Size header sorts largest first.
    harness.state_mut().set_filter("");
    harness.run();
    harness.get_by_label("Size").click();
    harness.run();
    harness.key_press(egui::Key::Home);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("b.weight"));
    harness.key_press(egui::Key::End);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("a.weight"));
    // Grouped by layer: Home is the first group, Right opens it, Down
    // enters it.
    harness.get_by_label("Group by layer").click();
    harness.run();
    harness.key_press(egui::Key::End);
    harness.run();
    harness.key_press(egui::Key::ArrowRight);
    harness.run();
    harness.key_press(egui::Key::ArrowDown);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("layers.1.y"));
    harness.get_by_label_contains("layer 1: 1 tensors");
}

#[test]
fn the_palette_and_the_action_keys() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = harness(open_app(&five_tensors(dir.path())));
    // The palette: Ctrl+K and a few letters of a name, typed so fast that
    // they reach the window in Ctrl+K's frame (none is lost), then Enter.
    harness.event(egui::Event::Key {
        key: egui::Key::K,
        physical_key: None,
        pressed: true,
        repeat: false,
        modifiers: egui::Modifiers::COMMAND,
    });
    harness.event(egui::Event::Text("l0x".into()));
    harness.run();
    assert!(harness.state().palette_is_open());
    assert_eq!(
        harness.get_by_label("Go to").value().as_deref(),
        Some("l0x")
    );
    harness.key_press(egui::Key::Enter);
    harness.step();
    assert!(!harness.state().palette_is_open());
    while harness.state().is_materializing() {
        harness.state_mut().wait_for_worker().expect("materialized");
    }
    harness.run();
    assert_eq!(harness.state().inspected_name(), Some("layers.0.x"));
    assert_eq!(harness.state().selected_tensor(), Some("layers.0.x"));
    // Its actions: "check" runs the value scan on the Check tab.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::K);
    harness.run();
    harness.get_by_label("Go to").type_text("read every");
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.run();
    assert_eq!(harness.state().tab(), Tab::Check);
    assert!(harness.state().is_checking_values());
    while harness.state().is_checking_values() {
        harness.state_mut().wait_for_worker().expect("scan");
    }
    harness.run();
    // Esc closes the palette without doing anything.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::K);
    harness.run();
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(!harness.state().palette_is_open());
    assert_eq!(harness.state().tab(), Tab::Check);
    // "record a": the Profiler with the record form open, the keyboard in
    // its command line, ready to type.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::K);
    harness.run();
    harness.get_by_label("Go to").type_text("record a");
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.step();
    // Letters typed in the frame the form opens are its command's first.
    harness.event(egui::Event::Text("echo".into()));
    harness.run();
    assert_eq!(harness.state().tab(), Tab::Profiler);
    let field = harness.get_by_label("Command line (run by sh -c)");
    assert!(field.is_focused());
    assert_eq!(field.value().as_deref(), Some("echo"));
    harness.key_press(egui::Key::Escape);
    harness.run();
    // Ctrl+Shift+D: the Diff tab with B's field focused, ready to type.
    harness.key_press_modifiers(
        egui::Modifiers::COMMAND | egui::Modifiers::SHIFT,
        egui::Key::D,
    );
    harness.run();
    assert_eq!(harness.state().tab(), Tab::Diff);
    harness.get_by_label("Compare with (B)").type_text("/b");
    harness.run();
    assert_eq!(
        harness.get_by_label("Compare with (B)").value().as_deref(),
        Some("/b")
    );
    // Ctrl+Shift+W: a walk on the Profiler tab.
    harness.key_press_modifiers(
        egui::Modifiers::COMMAND | egui::Modifiers::SHIFT,
        egui::Key::W,
    );
    harness.step();
    assert_eq!(harness.state().tab(), Tab::Profiler);
    assert!(harness.state().is_walking());
    while harness.state().is_walking() {
        harness.state_mut().wait_for_worker().expect("walk");
    }
}

#[test]
fn the_heatmap_colours_follow_the_values_and_max_abs_cells_show_outliers() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut signed = vec![0.01_f32; 64 * 64];
    for (i, v) in signed.iter_mut().enumerate() {
        if i % 2 == 1 {
            *v = -0.01;
        }
    }
    signed[5 * 64 + 7] = 40.0;
    let scales: Vec<f32> = (0..64 * 64).map(|i| 0.5 + (i % 13) as f32 * 0.1).collect();
    common::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[
            common::Tensor::f32("scales", &[64, 64], &scales),
            common::Tensor::f32("signed", &[64, 64], &signed),
        ],
    );
    let mut harness = harness(open_app(&dir.path().join("m.safetensors")));
    let show = |harness: &mut Harness<'static, WeightscopeApp>, name: &str| {
        harness.get_by_label(name).click();
        harness.step();
        harness.state_mut().wait_for_worker().expect("materialized");
        harness.run();
    };
    // Positive-only values: a sequential scale over their range, said so.
    show(&mut harness, "scales");
    harness.get_by_label_contains("sequential (every value >= 0)");
    harness.get_by_label("5.000e-1");
    // Signed values: diverging around 0.
    show(&mut harness, "signed");
    harness.get_by_label_contains("diverging around 0");
    harness.get_by_label_contains("each the mean of 1 x 1 values");
    harness.get_by_label("max |x|").click();
    harness.run();
    harness.get_by_label_contains("each the largest |value| of 1 x 1 values");
    harness.get_by_label_contains("sequential (every value >= 0)");
    harness.get_by_label("4.000e1");
}

/// The Diff tab names A and B, summarizes by module kind with each mode's
/// typical error, colours rows by it (with a legend), and opens a row: A
/// beside B, the error's heatmap; Close puts it away.
#[test]
fn a_diff_row_opens_a_beside_b() {
    let _lock = common::mlx_memory_lock();
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let values = |layer: usize, noise: f32| -> Vec<f32> {
        (0..4 * 64)
            .map(|i| ((i * 7 + layer) % 23) as f32 * 0.01 + if i % 3 == 0 { noise } else { 0.0 })
            .collect()
    };
    let write = |dir: &std::path::Path, noise: [f32; 4]| {
        let tensors: Vec<common::Tensor> = (0..4)
            .map(|l| {
                common::Tensor::f32(
                    &format!("model.layers.{l}.mlp.up_proj.weight"),
                    &[4, 64],
                    &values(l, noise[l]),
                )
            })
            .collect();
        common::write_safetensors(&dir.join("model.safetensors"), &tensors);
    };
    write(a.path(), [0.0; 4]);
    // Layer 3 differs a hundred times more than the others.
    write(b.path(), [1e-3, 1e-3, 1e-3, 1e-1]);
    let mut harness = harness(open_app(&a.path().join("model.safetensors")));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num3);
    harness.run();
    harness.get_by_label_contains("(the open checkpoint, through the view above)");
    harness.get_by_label("Compare with (B)").focus();
    harness.run();
    harness
        .get_by_label("Compare with (B)")
        .type_text(&b.path().display().to_string());
    harness.run();
    harness.get_by_label("Run diff").click();
    harness.step();
    while harness.state().is_diffing() {
        harness.state_mut().wait_for_worker().expect("diff events");
    }
    harness.run();
    harness.get_by_label_contains(&format!("B: {}", b.path().display()));
    // The overall figure is over the tensors that changed, said how.
    harness.get_by_label_contains("over 4 changed tensors");
    harness.get_by_label_contains("weighted by its parameters");
    harness.get_by_label_contains("By module kind (1)");
    harness.get_by_label_contains("F32: typical");
    harness.get_by_label_contains("over twice its mode's typical error");
    // Open layer 3's row.
    harness
        .get_by_label_contains("model.layers.3.mlp.up_proj.weight")
        .click();
    harness.step();
    while harness.state().diff_detail_is_pending() {
        harness.state_mut().wait_for_worker().expect("detail");
    }
    harness.run();
    let detail = harness.state().diff_detail().expect("opened");
    assert_eq!(detail.name, "model.layers.3.mlp.up_proj.weight");
    // The largest |a - b| is layer 3's noise (0.1 as f32).
    let noise = f64::from(0.1_f32);
    assert!(
        (detail.error.stats.max - noise).abs() < 1e-6,
        "{}",
        detail.error.stats.max
    );
    assert!(detail.groups.is_none(), "no quantized side");
    harness.get_by_label_contains("A: F32    B: F32");
    harness.get_by_label_contains("Histograms overlaid");
    harness.get_by_label_contains("Error |a - b| (4 x 64 cells");
    harness.get_by_label("Close").click();
    harness.run();
    assert!(harness.state().diff_detail().is_none());
    assert!(
        harness
            .query_by_label_contains("Histograms overlaid")
            .is_none()
    );
    // From the keyboard: Home is the worst row (layer 3), Down the next,
    // Enter opens it, Esc closes it.
    harness.key_press(egui::Key::Home);
    harness.run();
    harness.key_press(egui::Key::ArrowDown);
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.step();
    while harness.state().diff_detail_is_pending() {
        harness.state_mut().wait_for_worker().expect("detail");
    }
    harness.run();
    let second = harness.state().diff_detail().expect("opened").name.clone();
    assert_ne!(second, "model.layers.3.mlp.up_proj.weight");
    assert!(second.starts_with("model.layers."), "{second}");
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(harness.state().diff_detail().is_none());
}

/// A mixed conversion (config.json's default 4-bit, no layer at 4 bits):
/// the status bar names the bits its layers use, never the default.
#[test]
fn the_status_bar_names_a_mixed_recipe_by_its_layers() {
    use common::convert::{Recipe, convert_with};
    use weightscope::checkpoint::QuantMode;
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    convert_with(
        dir.path(),
        Recipe::of(QuantMode::Affine, 4),
        |module| {
            let bits = if module.contains("down_proj") { 6 } else { 3 };
            Some(Recipe::of(QuantMode::Affine, bits))
        },
        true,
        |_, _| {},
    );
    let harness = harness(open_app(dir.path()));
    harness.get_by_label_contains("mixed affine 3/6-bit");
    assert!(
        harness.query_by_label_contains("affine 4-bit").is_none(),
        "config.json's default is no layer's"
    );
}

/// Who held it, in the window: a recording whose job kept one array and 16
/// slices of it shows the Held by table with the root, and the slices'
/// bytes as counted beyond MLX active (never as memory MLX held).
#[test]
fn a_recording_shows_who_held_its_memory() {
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("views.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--interval-ms", "20", "--trace"])
        .arg(&trace)
        .arg("--")
        .arg(root.join("mlx-glue/test-venv/bin/python"))
        .arg(root.join("tests/record/held_jobs.py"))
        .arg("views")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("weightscope runs");
    assert!(status.success(), "recorded");
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 2400.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), open_app(&demo));
    harness.run();
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(Tab::Profiler));
    harness.state_mut().execute(AppCommand::LoadTrace(trace));
    harness.state_mut().wait_for_trace();
    harness.run();
    harness.get_by_label("Held by");
    harness.get_by_label("base");
    harness.get_by_label("counted twice");
    harness.get_by_label("-64.00 MiB");
}

/// A click anywhere on a tensor's row selects it and shows it: on its
/// size, on its shape, on the blank space after its name.
#[test]
fn every_cell_of_a_row_selects_it() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = harness(open_app(&five_tensors(dir.path())));
    // The size of b.weight (16 f32 values).
    harness.get_by_label("64 B").click();
    settle_preview(&mut harness);
    assert_eq!(harness.state().selected_tensor(), Some("b.weight"));
    assert_eq!(harness.state().inspected_name(), Some("b.weight"));
    // The shape of layers.1.y.
    harness.get_by_label("[2, 4]").click();
    settle_preview(&mut harness);
    assert_eq!(harness.state().selected_tensor(), Some("layers.1.y"));
    // Blank space in the name cell of c.bias: right of its name, left of
    // the next column.
    let name = harness.get_by_label("c.bias").rect();
    let stored = harness.get_by_label("Stored as").rect();
    let blank = egui::pos2(f32::midpoint(name.right(), stored.left()), name.center().y);
    assert!(
        blank.x > name.right() + 4.0,
        "no blank space: {name:?} {stored:?}"
    );
    harness.hover_at(blank);
    harness.event(egui::Event::PointerButton {
        pos: blank,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: egui::Modifiers::NONE,
    });
    harness.event(egui::Event::PointerButton {
        pos: blank,
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: egui::Modifiers::NONE,
    });
    settle_preview(&mut harness);
    assert_eq!(harness.state().selected_tensor(), Some("c.bias"));
    assert_eq!(harness.state().inspected_name(), Some("c.bias"));
    // A click on a name, then the arrows: the table still takes them.
    harness.get_by_label("a.weight").click();
    settle_preview(&mut harness);
    assert_eq!(harness.state().selected_tensor(), Some("a.weight"));
    harness.key_press(egui::Key::ArrowDown);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("b.weight"));
}

/// The palette on the 163-shard layout's 90k names: `mlp` lists the
/// MLP's tensors first, at least ten rows show at 1400x900, and the row
/// chosen with the arrows stays in view.
#[test]
fn the_palette_finds_what_was_meant_in_the_163_shard_layout() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    crate::layout::generate(dir.path());
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui_state(
            |ui, app: &mut WeightscopeApp| app.ui(ui),
            open_app(dir.path()),
        );
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::K);
    harness.run();
    harness.get_by_label("Go to").type_text("mlp");
    harness.run();
    let screen = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(1400.0, 900.0));
    let rows: Vec<(String, egui::Rect)> = harness
        .get_all_by(|node| node.label().is_some_and(|l| l.starts_with("Tensor: ")))
        .map(|node| {
            let label = node.accesskit_node().label().unwrap_or_default();
            (label, node.rect())
        })
        .collect();
    assert!(rows.len() >= 10, "{} rows listed", rows.len());
    let shown = rows
        .iter()
        .filter(|(_, rect)| screen.contains_rect(*rect))
        .count();
    assert!(shown >= 10, "{shown} rows on screen");
    for (name, _) in &rows {
        assert!(name.contains(".mlp."), "{name} listed for mlp");
    }
    // Down past the rows in view: the chosen row is drawn, on screen.
    for _ in 0..40 {
        harness.key_press(egui::Key::ArrowDown);
    }
    harness.run();
    let chosen = harness.state().palette_chosen().expect("a row chosen");
    assert!(chosen.contains(".mlp."), "{chosen}");
    assert_ne!(chosen, rows[0].0, "the highlight moved");
    let rect = harness.get_by_label(&chosen).rect();
    assert!(screen.contains_rect(rect), "{chosen} off screen: {rect:?}");
    // And back up to the first: in view again.
    for _ in 0..40 {
        harness.key_press(egui::Key::ArrowUp);
    }
    harness.run();
    let first = harness.state().palette_chosen().expect("a row chosen");
    assert_eq!(first, rows[0].0);
    assert!(screen.contains_rect(harness.get_by_label(&first).rect()));
}

/// Sorted by size, largest first, tensors of equal size keep the file's
/// order (layers 0 then 1), and so they do smallest first.
#[test]
fn a_size_sort_keeps_ties_in_file_order() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = harness(open_app(&five_tensors(dir.path())));
    let order = |harness: &Harness<'static, WeightscopeApp>| {
        let mut rows: Vec<(f32, &str)> =
            ["a.weight", "b.weight", "c.bias", "layers.0.x", "layers.1.y"]
                .into_iter()
                .map(|name| (harness.get_by_label(name).rect().top(), name))
                .collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        rows.into_iter().map(|(_, name)| name).collect::<Vec<_>>()
    };
    harness.get_by_label("Size").click();
    harness.run();
    assert_eq!(
        order(&harness),
        ["b.weight", "layers.0.x", "layers.1.y", "c.bias", "a.weight"]
    );
    harness.get_by_label_contains("Size").click();
    harness.run();
    assert_eq!(
        order(&harness),
        ["a.weight", "c.bias", "layers.0.x", "layers.1.y", "b.weight"]
    );
}

/// Browsing keeps MLX memory within the previews' budget: arrowing through
/// more tensors than it holds lets the least recently shown go (MLX's own
/// counters say so), the status bar says what they hold, and a pinned
/// tensor stays.
#[test]
fn browsing_stays_within_the_previews_budget() {
    const MIB: u64 = 1 << 20;
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let tensors: Vec<common::Tensor> = (0..8)
        .map(|i| common::Tensor::f32(&format!("t{i}"), &[512, 512], &vec![i as f32; 512 * 512]))
        .collect();
    let path = dir.path().join("m.safetensors");
    common::write_safetensors(&path, &tensors);
    mlx::clear_cache().expect("clear");
    let base = mlx::memory().expect("memory").active_bytes;
    let mut harness = harness(open_app(&path));
    harness
        .state_mut()
        .execute(AppCommand::SetPreviewBudget(3 * MIB));
    harness.get_by_label("t0").click();
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("t0"));
    // Pin the first one shown.
    harness.get_by_label("Pin: keep it in memory").click();
    harness.run();
    harness.state_mut().wait_for_worker().expect("pinned");
    for i in 1..8 {
        harness.key_press(egui::Key::ArrowDown);
        assert_eq!(
            settle_preview(&mut harness).as_deref(),
            Some(format!("t{i}").as_str())
        );
        while harness.state().previews_held().kept < i.min(3) {
            harness.state_mut().wait_for_worker().expect("held");
        }
        let active = mlx::memory().expect("memory").active_bytes - base;
        assert!(active <= 3 * MIB, "after t{i}: {active} bytes active");
    }
    harness.run();
    let held = harness.state().previews_held().clone();
    assert_eq!(held.used_bytes, 3 * MIB, "{held:?}");
    assert_eq!(held.pinned, ["t0"]);
    harness.get_by_label_contains("previews 3.00 MiB of 3.00 MiB, 1 tensor pinned");
}

/// A moment selected and an overlay made on one checkpoint's run stay
/// with it: opening another checkpoint shows its runs alone; an overlay
/// chosen names its run and checkpoint.
#[test]
fn a_selection_and_overlays_belong_to_the_run_they_were_made_on() {
    let _lock = common::mlx_memory_lock();
    let a = tempfile::tempdir().expect("tempdir");
    write_eight_shards(a.path());
    let b = tempfile::tempdir().expect("tempdir");
    let b_path = five_tensors(b.path());
    let mut harness = harness(open_app(a.path()));
    harness.get_by_label("Profiler").click();
    harness.run();
    harness.get_by_label("Run walk").click();
    harness.step();
    harness.step();
    finish_walk(&mut harness);
    harness.state_mut().select_moment(1.0);
    harness.get_by_label("Overlay this run").click();
    harness.run();
    let names = harness.state().overlay_names();
    assert_eq!(names.len(), 1);
    let a_name = a
        .path()
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(names[0].ends_with(&format!("on {a_name}")), "{names:?}");
    assert!(names[0].starts_with("release-shard none"), "{names:?}");
    harness.get_by_label_contains(&format!("x {}", names[0]));
    // A second walk of the same checkpoint: the moment selected on the
    // first is gone, the overlay chosen stays.
    harness.get_by_label("Run walk").click();
    harness.step();
    assert_eq!(harness.state().selected_moment(), None);
    harness.step();
    finish_walk(&mut harness);
    assert_eq!(harness.state().overlay_names(), names);
    // Another checkpoint: no moment, no overlay of the old one.
    harness.state_mut().select_moment(1.0);
    harness
        .state_mut()
        .execute(AppCommand::Open(b_path.clone()));
    while harness.state().opened_path() != Some(b_path.as_path()) {
        harness.state_mut().wait_for_worker().expect("opened");
    }
    harness.run();
    assert_eq!(harness.state().selected_moment(), None);
    assert!(harness.state().overlay_names().is_empty());
}

#[test]
fn journals_of_four_hosts_open_merged_with_each_rank_overlaid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = common::hosts::rank_journals(dir.path());
    let _lock = common::mlx_memory_lock();
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(Tab::Profiler));
    harness.run();
    // As the file dialog answers when three files are picked.
    harness
        .state_mut()
        .picked_for(Dialog::OpenTrace, (0..4).map(&journal).collect());
    harness.step(); // frames go on while the thread reads and merges
    harness.state_mut().wait_for_trace();
    harness.run();
    harness.get_by_label_contains("merged 4 journals of one job: rank ");
    let report = harness.state().merged_report();
    assert!(
        report[0].starts_with("4 recordings aligned by their collectives"),
        "{report:?}"
    );
    // Rank 2 (its clock 7 s ahead) held the most, and its line is named.
    assert!(
        report
            .iter()
            .any(|l| l.starts_with("highest: rank 2 (") && l.contains("job.py:")),
        "{report:?}"
    );
    // The journal that started first is shown as the run; the other ranks
    // are overlays named by rank and host, on its clock (not 7 s away).
    let overlays = harness.state().overlay_names();
    assert_eq!(overlays.len(), 3, "{overlays:?}");
    let shown: Vec<u32> = (0..4)
        .filter(|r| {
            !overlays
                .iter()
                .any(|o| o.starts_with(&format!("rank {r} (")))
        })
        .collect();
    assert_eq!(shown.len(), 1, "{overlays:?}");
    harness.get_by_label_contains(&format!("of one job: rank {} (", shown[0]));
    for line in &report {
        harness.get_by_label(line);
    }
    // Below the timeline, chosen by itself: each rank a band, stacked,
    // the top the job's total (its caption is drawn only then).
    harness.get_by_label("ranks");
    harness.get_by_label_contains("Each rank's memory (");
    // A pattern typed in the trace path field merges the same journals.
    let pattern = dir.path().join("rank*.jsonl");
    harness
        .get_by_label("Trace path")
        .set_text_value_accesskit(&pattern.display().to_string());
    harness.run();
    harness.get_by_label("Open from path").click();
    harness.step();
    harness.state_mut().wait_for_trace();
    harness.run();
    harness.get_by_label_contains("merged 4 journals of one job: rank ");
    assert_eq!(harness.state().merged_report(), report);
    assert_eq!(harness.state().overlay_names(), overlays);
    let none = dir.path().join("nothing-*.jsonl");
    harness
        .get_by_label("Trace path")
        .set_text_value_accesskit(&none.display().to_string());
    harness.run();
    harness.get_by_label("Open from path").click();
    harness.run();
    harness.get_by_label_contains("nothing-*.jsonl: no file matches");
    // One journal that is not a recording: said, naming the file.
    let walk = dir.path().join("walk.json");
    let walked = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("walk")
        .arg(&demo)
        .args(["--policy", "release-shard", "--trace"])
        .arg(&walk)
        .output()
        .expect("walk runs");
    assert!(walked.status.success());
    harness
        .state_mut()
        .picked_for(Dialog::OpenTrace, vec![journal(0), walk]);
    harness.step();
    harness.state_mut().wait_for_trace();
    harness.run();
    harness.get_by_label_contains("walk.json: not a recording");
    // The run shown is kept.
    assert_eq!(harness.state().overlay_names().len(), 3);
}
