//! Issue #58: the profiler's list of recordings and its overlays belong to
//! what they show. Each recording is named by what the user typed (not
//! `sh -c …`), can be renamed, and "show" neither reorders the list nor
//! overlays the run that was shown; a walk's overlay is not drawn over a
//! recorded job (nor sets its axes), and "Clear overlays" removes them all.

use crate::common;

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use weightscope::app::{AppCommand, WeightscopeApp};
use weightscope::profile::capture::{JobSpec, Target};
use weightscope::weights::demo;

fn record_line(harness: &mut Harness<'static, WeightscopeApp>, line: &str) {
    harness.state_mut().execute(AppCommand::Record(
        Target::Spawn(JobSpec {
            argv: vec!["sh".into(), "-c".into(), line.into()],
            capture_output: true,
            ..JobSpec::default()
        }),
        None,
    ));
    assert!(crate::hooks(harness).wait_for_recording());
    harness.run();
}

#[test]
fn recordings_are_named_by_what_was_typed_and_show_keeps_the_list_and_overlays() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut harness = crate::window_on(&demo, egui::vec2(1400.0, 900.0));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    // A walk, overlaid.
    harness.get_by_label("Run walk").click();
    harness.step();
    harness.step();
    crate::wait_while(&mut harness, |h| h.is_walking());
    harness.run();
    harness.get_by_label("Overlay this run").click();
    harness.run();
    assert_eq!(crate::hooks(&mut harness).overlay_names().len(), 1);
    harness.get_by_label_contains("- - release-shard");

    // Two recordings: named by the typed line.
    record_line(&mut harness, "echo first");
    record_line(&mut harness, "echo second");
    harness.get_by_label_contains("echo first: exit 0");
    harness.get_by_label_contains("echo second: exit 0");
    let said: Vec<String> = harness
        .query_all_by_label_contains("sh -c echo second: ")
        .map(|n| n.accesskit_node().label().unwrap_or_default())
        .collect();
    assert!(said.is_empty(), "the list says what was typed: {said:?}");
    // The walk's overlay is not drawn over a recorded job: its chip says
    // so, and the plot's legend has no dashed entry.
    harness.get_by_label_contains("(not drawn here)");
    assert!(
        harness
            .query_by_label_contains("- - release-shard")
            .is_none()
    );

    // "show" on the first: shown, the list in the same order, no overlay
    // added.
    let rows = |harness: &Harness<'static, WeightscopeApp>| {
        harness
            .query_all_by_label_contains(": exit 0")
            .map(|n| n.accesskit_node().label().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let before = rows(&harness);
    harness.get_by_label("show").click();
    harness.run();
    assert_eq!(rows(&harness), before, "the list kept its order");
    assert_eq!(
        crate::hooks(&mut harness).overlay_names().len(),
        1,
        "nothing overlaid unasked"
    );

    // Renamed: Enter keeps the new name.
    harness
        .query_all_by_label("rename")
        .next()
        .expect("a rename button")
        .click();
    harness.run();
    harness.get_by_label("Name").type_text(" (baseline)");
    harness.run();
    harness.key_press(egui::Key::Enter);
    harness.run();
    harness.get_by_label_contains("echo first (baseline): exit 0");

    // Clear overlays.
    harness.get_by_label("Clear overlays").click();
    harness.run();
    assert!(crate::hooks(&mut harness).overlay_names().is_empty());
}
