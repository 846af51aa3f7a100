//! The keyboard: fields, the table, the palette, F1's list.

use super::{five_tensors, harness, open_app, settle_preview};
use crate::common;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use weightscope::app::{AppCommand, Tab, WeightscopeApp};

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
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    harness.get_by_label_contains("All finite values are 0.");
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
    assert_eq!(
        crate::hooks(&mut harness).selected_tensor(),
        Some("a.weight")
    );
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
    crate::hooks(&mut harness).set_filter("layers");
    harness.run();
    assert_eq!(
        crate::hooks(&mut harness).selected_tensor(),
        None,
        "the hidden row is not selected"
    );
    harness.key_press(egui::Key::Enter);
    harness.run();
    assert_eq!(
        crate::hooks(&mut harness).inspected_name(),
        Some("b.weight")
    );
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
    crate::hooks(&mut harness).set_filter("");
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
    assert!(crate::hooks(&mut harness).palette_is_open());
    assert_eq!(
        harness.get_by_label("Go to").value().as_deref(),
        Some("l0x")
    );
    harness.key_press(egui::Key::Enter);
    harness.step();
    assert!(!crate::hooks(&mut harness).palette_is_open());
    crate::wait_while(&mut harness, |h| h.is_materializing());
    harness.run();
    assert_eq!(
        crate::hooks(&mut harness).inspected_name(),
        Some("layers.0.x")
    );
    assert_eq!(
        crate::hooks(&mut harness).selected_tensor(),
        Some("layers.0.x")
    );
    // Its actions: "check" runs the value scan on the Check tab.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::K);
    harness.run();
    harness.get_by_label("Go to").type_text("read every");
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.run();
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Check);
    assert!(crate::hooks(&mut harness).is_checking_values());
    crate::wait_while(&mut harness, |h| h.is_checking_values());
    harness.run();
    // Esc closes the palette without doing anything.
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::K);
    harness.run();
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(!crate::hooks(&mut harness).palette_is_open());
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Check);
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
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Profiler);
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
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Diff);
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
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Profiler);
    assert!(crate::hooks(&mut harness).is_walking());
    crate::wait_while(&mut harness, |h| h.is_walking());
}

/// The palette on the 163-shard layout's 90k names: `mlp` lists the
/// MLP's tensors first, at least ten rows show at 1400x900, and the row
/// chosen with the arrows stays in view. The folder's name holds the
/// letters m, l, p apart: its "Open recent" row ranks below the tensors
/// whose names hold `mlp` as a word (a random temporary name did so by
/// chance, and listed first).
#[test]
fn the_palette_finds_what_was_meant_in_the_163_shard_layout() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::Builder::new()
        .prefix("m.l.p-")
        .tempdir()
        .expect("tempdir");
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
    let chosen = crate::hooks(&mut harness)
        .palette_chosen()
        .expect("a row chosen");
    assert!(chosen.contains(".mlp."), "{chosen}");
    assert_ne!(chosen, rows[0].0, "the highlight moved");
    let rect = harness.get_by_label(&chosen).rect();
    assert!(screen.contains_rect(rect), "{chosen} off screen: {rect:?}");
    // And back up to the first: in view again.
    for _ in 0..40 {
        harness.key_press(egui::Key::ArrowUp);
    }
    harness.run();
    let first = crate::hooks(&mut harness)
        .palette_chosen()
        .expect("a row chosen");
    assert_eq!(first, rows[0].0);
    assert!(screen.contains_rect(harness.get_by_label(&first).rect()));
}
