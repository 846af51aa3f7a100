//! A PyTorch file in the window: opened without running its pickle, its
//! shard says the pickle's verdict and names what it imports, a tied name
//! says whose storage it is on, and a tensor's values are shown.

use egui_kittest::kittest::Queryable;
use std::path::Path;

/// Writes `file` with torch.save (Debian's torch, the torch test venv): a
/// weight, its transpose, a tied name, and a value whose `__reduce__`
/// would run `touch PWNED` beside it.
fn write_evil(dir: &Path) -> std::path::PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue/test-venv-torch/bin/python");
    assert!(python.exists(), "run `mlx-glue/setup test`");
    let file = dir.join("evil.bin");
    let script = format!(
        "import collections, os, torch\n\
         class Evil:\n    def __reduce__(self):\n        return (os.system, ('touch {pwned}',))\n\
         w = torch.arange(12, dtype=torch.float32).reshape(3, 4)\n\
         torch.save(collections.OrderedDict([('embed.weight', w), ('head.weight', w), \
         ('embed.t', w.t()), ('evil', Evil())]), '{file}')\n",
        pwned = dir.join("PWNED").display(),
        file = file.display()
    );
    let output = std::process::Command::new(python)
        .args(["-c", &script])
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    file
}

#[test]
fn a_torch_file_opens_with_its_verdict_its_ties_and_its_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_evil(dir.path());
    let mut harness = crate::window_on(&file, egui::vec2(1400.0, 860.0));
    harness
        .get_by_label_contains("PyTorch (zip), pickle dangerous")
        .scroll_to_me();
    harness.get_by_label_contains("imports posix.system (dangerous)");
    harness.get_by_label_contains("F32 tied to embed.weight");
    harness.get_by_label_contains("F32 view of embed.weight");
    harness.get_by_label("embed.t").click();
    harness.step();
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    // The transpose, read through its strides: 0, 4, 8, 1, 5, 9...
    harness.get_by_label_contains("shape [4, 3]");
    // In the grid of first values, 0, 4, 8 then 1 (not 0, 1, 2, 3).
    let x = |v: f32| harness.get_by_label(&format!("{v:>11.4e}")).rect().left();
    assert!(x(0.0) < x(4.0) && x(4.0) < x(8.0) && x(8.0) < x(1.0));
    assert!(
        !dir.path().join("PWNED").exists(),
        "the pickle's command ran"
    );
}
