//! Views, the Diff tab and the Check tab.

use super::{harness, open_app, write_qwen_source_and_conversion};
use crate::common;
use egui_kittest::kittest::Queryable;
use weightscope::app::{AppCommand, Tab};
use weightscope::mlx;

#[test]
fn views_show_both_names_the_drops_and_the_fix_up_and_the_diff_tab_compares() {
    let _lock = common::mlx_memory_lock();
    let source = tempfile::tempdir().expect("tempdir");
    let converted = tempfile::tempdir().expect("tempdir");
    write_qwen_source_and_conversion(source.path(), converted.path());
    let mut harness = harness(open_app(source.path()));
    assert_eq!(
        crate::hooks(&mut harness).view().map(|v| v.name.as_str()),
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("reopened");
    harness.run();
    assert!(crate::hooks(&mut harness).view().is_none());
    harness.get_by_label_contains("installed: none");
    harness.get_by_label_contains("3 of 3 tensors");

    // The converted checkpoint against the source through the view: equal.
    harness
        .state_mut()
        .execute(AppCommand::Open(converted.path().to_path_buf()));
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("opened");
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
    crate::wait_while(&mut harness, |h| h.is_diffing());
    harness.run();
    let report = crate::hooks(&mut harness).diff_report().expect("a report");
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
    crate::wait_while(&mut harness, |h| h.is_diffing());
    harness.run();
    assert!(
        crate::hooks(&mut harness).diff_report().is_none(),
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
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Check);
    harness.get_by_label_contains("quant.missing-biases");
    harness.get_by_label_contains("affine weight `model.layers.0.mlp.up_proj.weight` has no");

    // The values: the NaN is found, the badge counts it.
    harness.get_by_label("Read values").click();
    harness.step();
    crate::wait_while(&mut harness, |h| h.is_checking_values());
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
    assert!(crate::hooks(&mut harness).is_checking_values());
    harness.get_by_label("Cancel").click();
    harness.step();
    assert!(crate::hooks(&mut harness).value_scan_cancel_requested());
    crate::wait_while(&mut harness, |h| h.is_checking_values());
    harness.run();

    // A row selects its tensor and opens it in the inspector.
    harness
        .get_all_by_label("model.layers.0.mlp.up_proj.weight")
        .next()
        .expect("a row naming the tensor")
        .click();
    harness.step();
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Tensors);
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("answered");
    harness.run();
    // Its values cannot be shown, and the inspector says why.
    harness.get_by_label_contains("affine quantization needs biases");
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
    crate::wait_while(&mut harness, |h| h.is_diffing());
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
    while crate::hooks(&mut harness).diff_detail_is_pending() {
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("detail");
    }
    harness.run();
    let detail = crate::hooks(&mut harness).diff_detail().expect("opened");
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
    assert!(crate::hooks(&mut harness).diff_detail().is_none());
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
    while crate::hooks(&mut harness).diff_detail_is_pending() {
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("detail");
    }
    harness.run();
    let second = crate::hooks(&mut harness)
        .diff_detail()
        .expect("opened")
        .name
        .clone();
    assert_ne!(second, "model.layers.3.mlp.up_proj.weight");
    assert!(second.starts_with("model.layers."), "{second}");
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(crate::hooks(&mut harness).diff_detail().is_none());
}
