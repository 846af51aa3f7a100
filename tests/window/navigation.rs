//! Issue #58: moving through the tensor table (arrows, Page Down, Home,
//! End, a palette jump) previews small tensors and never starts gigabytes
//! of work: a tensor over the preview budget is materialized only on an
//! explicit Enter or click, its size said first.

use crate::common;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use weightscope::app::{AppCommand, WeightscopeApp};
use weightscope::mlx;

/// Two small tensors and, last by name, one of 2 MiB.
fn with_a_big_one(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("m.safetensors");
    common::write_safetensors(
        &path,
        &[
            common::Tensor::f32("a.weight", &[2], &[1.0, 2.0]),
            common::Tensor::f32("b.weight", &[4, 4], &[0.5; 16]),
            common::Tensor::f32("z.big", &[512, 1024], &vec![0.25; 512 * 1024]),
        ],
    );
    path
}

fn open(path: &std::path::Path) -> Harness<'static, WeightscopeApp> {
    let mut app = WeightscopeApp::new(Some(path.to_path_buf()), mlx::default_device(), || {})
        .expect("worker");
    app.hooks().wait_for_worker().expect("opened");
    // A preview budget of 1 MiB: the 2 MiB tensor is over it.
    app.execute(AppCommand::SetPreviewBudget(1 << 20));
    app.hooks().wait_for_worker().expect("budget set");
    crate::window_of(app, egui::vec2(1400.0, 860.0))
}

/// Two frames (the preview waits for the selection to rest; a step is a
/// quarter second of the harness's clock), then whatever was asked done.
fn settle(harness: &mut Harness<'static, WeightscopeApp>) {
    harness.step();
    harness.step();
    crate::wait_while(harness, |h| h.is_materializing());
    harness.run();
}

#[test]
fn end_on_a_tensor_over_the_preview_budget_says_its_size_and_enter_materializes_it() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = open(&with_a_big_one(dir.path()));
    // A small one previews as the selection moves onto it.
    harness.key_press(egui::Key::Home);
    settle(&mut harness);
    assert_eq!(
        crate::hooks(&mut harness).inspected_name(),
        Some("a.weight")
    );
    harness.get_by_label_contains("min");
    // End: the big one is selected, not materialized; its size is said.
    harness.key_press(egui::Key::End);
    settle(&mut harness);
    assert_eq!(crate::hooks(&mut harness).inspected_name(), Some("z.big"));
    assert!(!crate::hooks(&mut harness).is_materializing());
    harness.get_by_label_contains("2.00 MiB to materialize");
    harness.get_by_label("Materialize (2.00 MiB)");
    assert!(
        harness.query_by_label_contains("min").is_none(),
        "no values were shown for a tensor nobody asked for"
    );
    // Enter asks for it: materialized whatever its size.
    harness.key_press(egui::Key::Enter);
    settle(&mut harness);
    assert_eq!(crate::hooks(&mut harness).inspected_name(), Some("z.big"));
    harness.get_by_label_contains("min");
}

#[test]
fn a_palette_jump_to_a_big_tensor_holds_it_back_and_the_button_materializes_it() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = open(&with_a_big_one(dir.path()));
    harness.state_mut().execute(AppCommand::SelectTensor(2));
    settle(&mut harness);
    assert_eq!(crate::hooks(&mut harness).inspected_name(), Some("z.big"));
    assert!(!crate::hooks(&mut harness).is_materializing());
    harness.get_by_label("Materialize (2.00 MiB)").click();
    settle(&mut harness);
    harness.get_by_label_contains("min");
    // A small one by the palette: at once.
    harness.state_mut().execute(AppCommand::SelectTensor(1));
    settle(&mut harness);
    assert_eq!(
        crate::hooks(&mut harness).inspected_name(),
        Some("b.weight")
    );
    harness.get_by_label_contains("min");
}

#[test]
fn the_filter_reads_size_dtype_and_shape_terms_beside_name_words() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = open(&with_a_big_one(dir.path()));
    for (filter, shown, hidden) in [
        ("size>1M", &["z.big"][..], &["a.weight", "b.weight"][..]),
        (
            "weight dtype:F32 shape:4x4",
            &["b.weight"][..],
            &["a.weight", "z.big"][..],
        ),
        (
            "shape:*x1024",
            &["z.big"][..],
            &["a.weight", "b.weight"][..],
        ),
        (
            "SIZE<=64 weight",
            &["a.weight", "b.weight"][..],
            &["z.big"][..],
        ),
    ] {
        crate::hooks(&mut harness).set_filter(filter);
        harness.run();
        for name in shown {
            harness.get_by_label_contains(name);
        }
        for name in hidden {
            assert!(
                harness.query_by_label_contains(name).is_none(),
                "{filter}: {name} shown"
            );
        }
    }
    // A term that cannot be read is said; the rows stay as they were.
    crate::hooks(&mut harness).set_filter("shape:4by4");
    harness.run();
    harness.get_by_label_contains("a shape is sizes joined by x");
}

#[test]
fn at_800x500_the_profilers_graph_comes_first_and_the_table_keeps_its_rows() {
    use egui_kittest::kittest::NodeT;
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = weightscope::weights::demo::ensure_demo(dir.path()).expect("demo");
    let mut harness = crate::window_on(&demo, egui::vec2(800.0, 500.0));
    // The tensor table shows every row of the demo's 8 (the memory strip
    // keeps to its least).
    let rows = harness
        .query_all_by(|n| {
            n.label()
                .is_some_and(|l| l.contains(".weight") || l.contains("_norm"))
        })
        .count();
    assert!(rows >= 7, "{rows} rows at 800x500");
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    // The graph's caption and its plot start in the top half of the
    // window, the controls under it.
    let caption = harness.get_by_label_contains("Memory (");
    let top = caption.accesskit_node().bounding_box().expect("placed").y0;
    assert!(top < 250.0, "the graph starts at {top}");
    let walk = harness.get_by_label("Run walk");
    let walk_top = walk.accesskit_node().bounding_box().expect("placed").y0;
    assert!(walk_top > top, "the controls come after the graph");
}

#[test]
fn an_outlier_heavy_heatmap_offers_clipping_and_opens_large() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.safetensors");
    let mut values = vec![0.01_f32; 64 * 64];
    for (i, v) in values.iter_mut().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let x = (i % 64) as f32 / 64.0 - 0.5;
        *v = x * 0.02;
    }
    values[0] = 1000.0;
    common::write_safetensors(
        &path,
        &[
            common::Tensor::f32("outlier", &[64, 64], &values),
            common::Tensor::f32("same", &[8, 8], &[3.0; 64]),
        ],
    );
    let mut harness = open(&path);
    harness.get_by_label_contains("outlier").click();
    settle(&mut harness);
    harness.get_by_label_contains("An outlier sets the colours");
    harness
        .get_by_label("Clip colours to the 1st-99th percentile")
        .click();
    harness.run();
    assert!(
        harness
            .query_by_label_contains("An outlier sets the colours")
            .is_none()
    );
    harness
        .get_by_label("Open the heatmap large")
        .scroll_to_me();
    harness.run();
    harness.get_by_label("Open the heatmap large").click();
    harness.run();
    harness.get_by_label_contains("Heatmap: outlier");
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(
        harness
            .query_by_label_contains("Heatmap: outlier")
            .is_none()
    );
    // A constant tensor: said in words, its histogram opens large too.
    harness.get_by_label_contains("same").click();
    settle(&mut harness);
    harness.get_by_label_contains("All finite values are 3.000000e0.");
    harness
        .get_by_label("Open the histogram large")
        .scroll_to_me();
    harness.run();
    harness.get_by_label("Open the histogram large").click();
    harness.run();
    harness.get_by_label_contains("Histogram: same");
}

#[test]
fn the_zoom_and_the_theme_are_remembered() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut harness = open(&with_a_big_one(dir.path()));
    // Ctrl+plus as egui zooms: saved in percent.
    harness.ctx.set_zoom_factor(1.5);
    harness.run();
    let saved = harness
        .state_mut()
        .take_changed_settings()
        .cloned()
        .expect("saved");
    assert_eq!(saved.zoom_percent, Some(150));
    // A theme chosen in the palette: put on the window and saved.
    harness
        .state_mut()
        .execute(AppCommand::SetTheme(Some(egui::Theme::Light)));
    harness.run();
    assert_eq!(
        harness.ctx.options(|o| o.theme_preference),
        egui::ThemePreference::Light
    );
    let saved = harness
        .state_mut()
        .take_changed_settings()
        .cloned()
        .expect("saved");
    assert_eq!(saved.theme.as_deref(), Some("light"));
    // A new window with those settings starts zoomed, in that theme.
    let mut app = WeightscopeApp::new(
        Some(dir.path().join("m.safetensors")),
        mlx::default_device(),
        || {},
    )
    .expect("worker");
    app.hooks().wait_for_worker().expect("opened");
    app.set_settings(saved);
    let again = crate::window_of(app, egui::vec2(1400.0, 860.0));
    assert!((again.ctx.zoom_factor() - 1.5).abs() < 1e-6);
    assert_eq!(
        again.ctx.options(|o| o.theme_preference),
        egui::ThemePreference::Light
    );
}

/// `n` small tensors named `t.000` .. in one file.
fn many(dir: &std::path::Path, prefix: &str, n: usize) -> std::path::PathBuf {
    let path = dir.join(format!("{prefix}.safetensors"));
    let tensors: Vec<common::Tensor> = (0..n)
        .map(|i| common::Tensor::f32(&format!("{prefix}.{i:03}"), &[1], &[1.0]))
        .collect();
    common::write_safetensors(&path, &tensors);
    path
}

#[test]
fn a_new_checkpoint_opens_at_the_top_of_its_table_and_names_sort_as_numbers() {
    use egui_kittest::kittest::NodeT;
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let a = many(dir.path(), "a", 200);
    let b = many(dir.path(), "b", 200);
    let mut harness = open(&a);
    // To the bottom of A.
    harness.key_press(egui::Key::End);
    settle(&mut harness);
    assert!(harness.query_all_by_label("a.199").count() >= 1);
    assert!(harness.query_by_label("a.000").is_none());
    // B opens at its top, not where A was scrolled.
    harness.state_mut().execute(AppCommand::Open(b.clone()));
    while crate::hooks(&mut harness).opened_path() != Some(b.as_path()) {
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("opened");
    }
    harness.run();
    let first = harness.get_by_label("b.000");
    assert!(
        first
            .accesskit_node()
            .bounding_box()
            .is_some_and(|r| r.y0 < 400.0)
    );
    // Name order: numbers as numbers (`layers.2` before `layers.10`).
    let c = dir.path().join("c.safetensors");
    common::write_safetensors(
        &c,
        &[
            common::Tensor::f32("layers.10.w", &[1], &[1.0]),
            common::Tensor::f32("layers.2.w", &[1], &[1.0]),
            common::Tensor::f32("layers.1.w", &[1], &[1.0]),
        ],
    );
    harness.state_mut().execute(AppCommand::Open(c.clone()));
    while crate::hooks(&mut harness).opened_path() != Some(c.as_path()) {
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("opened");
    }
    harness.run();
    harness.get_by_label("Name").click();
    harness.run();
    let y = |name: &str| {
        harness
            .get_by_label(name)
            .accesskit_node()
            .bounding_box()
            .expect("placed")
            .y0
    };
    assert!(y("layers.1.w") < y("layers.2.w") && y("layers.2.w") < y("layers.10.w"));
}
