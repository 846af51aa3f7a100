//! The window's behaviour, driven headlessly by accessibility label with
//! `egui_kittest`, on the real MLX worker and real files: one file per
//! part of the window, the harness and shared checkpoints here.

use crate::common;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use weightscope::app::WeightscopeApp;
use weightscope::mlx;

mod browse;
mod diff_check;
mod keys;
mod profiler;

pub(super) fn harness(app: WeightscopeApp) -> Harness<'static, WeightscopeApp> {
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 860.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), app);
    harness.run();
    harness
}

pub(super) fn open_app(path: &std::path::Path) -> WeightscopeApp {
    let mut app = WeightscopeApp::new(Some(path.to_path_buf()), mlx::default_device(), || {})
        .expect("worker");
    app.hooks().wait_for_worker().expect("opened");
    app
}

/// 8 shards of two 1 MiB f32 tensors each.
pub(super) fn write_eight_shards(dir: &std::path::Path) {
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

pub(super) fn finish_walk(harness: &mut Harness<'static, WeightscopeApp>) {
    crate::wait_while(harness, |h| h.is_walking());
    harness.run();
}

/// Saves the trace through the path field; saving again asks before
/// replacing it, and a path inside `checkpoint` is refused.
/// `path` typed (set) in the profiler's trace path field.
pub(super) fn trace_path(harness: &mut Harness<'static, WeightscopeApp>, path: &std::path::Path) {
    harness
        .get_by_label("Trace path")
        .set_text_value_accesskit(&path.display().to_string());
    harness.run();
}

/// Frames until the trace being saved or exported (on its thread) is
/// written and said.
pub(super) fn written(harness: &mut Harness<'static, WeightscopeApp>) {
    harness.step();
    crate::hooks(harness).wait_for_trace();
    harness.run();
}

pub(super) fn save_by_path(
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
    written(harness);
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
    written(harness);
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

/// A Qwen3-Next-shaped source (as Hugging Face stores it) and its MLX conversion.
pub(super) fn write_qwen_source_and_conversion(
    source: &std::path::Path,
    converted: &std::path::Path,
) {
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

/// Steps frames until the keyboard's preview has asked for a tensor, and
/// the worker has shown it; returns the inspector's tensor.
pub(super) fn settle_preview(harness: &mut Harness<'static, WeightscopeApp>) -> Option<String> {
    // The key's frame, then one more: the preview waits for the selection
    // to rest, and each step is a quarter second of the harness's clock,
    // longer than that wait.
    harness.step();
    harness.step();
    crate::wait_while(harness, |h| h.is_materializing());
    harness.run();
    crate::hooks(harness).inspected_name().map(str::to_owned)
}

/// Five small tensors of different sizes, two in numbered layers.
pub(super) fn five_tensors(dir: &std::path::Path) -> std::path::PathBuf {
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
