//! Opening checkpoints, browsing the table, previews and the status bar.

use super::{five_tensors, harness, open_app, settle_preview};
use crate::common;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use weightscope::app::{AppCommand, Dialog, WeightscopeApp};
use weightscope::mlx;
use weightscope::weights::demo;

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
    crate::hooks(&mut harness).set_filter("^model\\.layers\\.0\\.mlp\\.(up|down)_proj\\.weight$");
    harness.run();
    harness.get_by_label_contains("2 of 10 tensors");
    crate::hooks(&mut harness).set_filter("up_proj");
    harness.run();

    // Click the quantized weight: materialized on the worker, shown dequantized.
    harness.get_by_label_contains("mlp.up_proj.weight").click();
    // One frame at a time while the spinner spins (it keeps asking for repaints).
    harness.step();
    harness.step();
    harness.get_by_label_contains("materializing");
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
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
    crate::hooks(&mut harness)
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("released");
    harness.run();
    harness.get_by_label("released");

    // The memory strip: live figures, and the last event named.
    assert!(crate::hooks(&mut harness).wait_for_sample());
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("opened");
    harness.run();
    harness.get_by_label_contains("1 of 1 tensors");
    assert!(harness.query_by_label_contains("cannot read").is_none());
    // A file that is not a checkpoint: the open checkpoint stays, and the
    // status bar says the open failed beside its badge.
    let passwd = dir.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/sh\n").expect("write");
    harness.state_mut().execute(AppCommand::Open(passwd));
    while harness.state().is_opening() {
        crate::hooks(&mut harness)
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
        crate::hooks(&mut harness).path_input(),
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("answered");
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
    assert_eq!(
        crate::hooks(&mut harness).inspected_name(),
        Some(previewed.as_str())
    );
    assert!(!crate::hooks(&mut harness).is_materializing());
    harness.get_by_label_contains("lm_head.weight").click();
    harness.step();
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    let first = crate::hooks(&mut harness).heatmap_keys();
    assert_eq!(first.len(), 1, "{first:?}");

    harness
        .state_mut()
        .execute(AppCommand::Open(b.path().to_path_buf()));
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("opened");
    harness.run();
    assert!(
        crate::hooks(&mut harness).heatmap_keys().is_empty(),
        "dropped on open"
    );
    harness
        .state_mut()
        .execute(AppCommand::Materialize("w".into()));
    harness.step();
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    let second = crate::hooks(&mut harness).heatmap_keys();
    assert_eq!(second.len(), 1);
    assert_ne!(first, second, "a new texture for the new values");
    harness.get_by_label_contains("-1.260000e2");
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
    while !crate::hooks(&mut harness)
        .wait_for_any_event()
        .expect("event")
    {}
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
        crate::hooks(&mut harness)
            .wait_for_any_event()
            .expect("event");
    }
    harness.run();
    harness.get_by_label_contains("120 of 120 tensors");
    assert!(harness.query_by_label_contains("opening").is_none());
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
        crate::hooks(harness)
            .wait_for_worker()
            .expect("materialized");
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
    assert_eq!(
        crate::hooks(&mut harness).selected_tensor(),
        Some("b.weight")
    );
    assert_eq!(
        crate::hooks(&mut harness).inspected_name(),
        Some("b.weight")
    );
    // The shape of layers.1.y.
    harness.get_by_label("[2, 4]").click();
    settle_preview(&mut harness);
    assert_eq!(
        crate::hooks(&mut harness).selected_tensor(),
        Some("layers.1.y")
    );
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
    assert_eq!(crate::hooks(&mut harness).selected_tensor(), Some("c.bias"));
    assert_eq!(crate::hooks(&mut harness).inspected_name(), Some("c.bias"));
    // A click on a name, then the arrows: the table still takes them.
    harness.get_by_label("a.weight").click();
    settle_preview(&mut harness);
    assert_eq!(
        crate::hooks(&mut harness).selected_tensor(),
        Some("a.weight")
    );
    harness.key_press(egui::Key::ArrowDown);
    assert_eq!(settle_preview(&mut harness).as_deref(), Some("b.weight"));
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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("pinned");
    for i in 1..8 {
        harness.key_press(egui::Key::ArrowDown);
        assert_eq!(
            settle_preview(&mut harness).as_deref(),
            Some(format!("t{i}").as_str())
        );
        while crate::hooks(&mut harness).previews_held().kept < i.min(3) {
            crate::hooks(&mut harness).wait_for_worker().expect("held");
        }
        let active = mlx::memory().expect("memory").active_bytes - base;
        assert!(active <= 3 * MIB, "after t{i}: {active} bytes active");
    }
    harness.run();
    let held = crate::hooks(&mut harness).previews_held().clone();
    assert_eq!(held.used_bytes, 3 * MIB, "{held:?}");
    assert_eq!(held.pinned, ["t0"]);
    harness.get_by_label_contains("previews 3.00 MiB of 3.00 MiB, 1 tensor pinned");
}
