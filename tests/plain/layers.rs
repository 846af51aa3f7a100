//! The layering, enforced: each module of `src/` may refer only to the
//! layers below it (checkpoint at the bottom beside `units`, remote above it,
//! mlx beside them, then weights, profile, worker, and app and cli beside
//! each other at the top), and only `src/mlx` may name `mlx_rs` or
//! `mlx_sys`. Cargo features check the bottom layers as the compiler
//! builds them (the format layer builds with none); this test keeps the
//! order among the layers of one feature, which the compiler cannot see.

use std::path::Path;

/// A layer and the layers it may use.
const ALLOWED: &[(&str, &[&str])] = &[
    ("units", &[]),
    ("environment", &["units"]),
    // A finding's shape, shared by the checkpoint doctor and the profiler.
    ("finding", &["units"]),
    // Where weightscope's cache is comes from the environment read once.
    ("files", &["units", "environment"]),
    ("par", &[]),
    // The format layer (no feature: no MLX, egui or network); the compiler
    // checks it too (`cargo test --no-default-features`).
    (
        "checkpoint",
        &["units", "environment", "files", "finding", "par"],
    ),
    (
        "remote",
        &[
            "units",
            "environment",
            "files",
            "finding",
            "par",
            "checkpoint",
        ],
    ),
    // Memory as plain data, below MLX: the mlx layer reads MLX's figures
    // into it.
    ("memory", &["units", "environment", "files", "par"]),
    ("mlx", &["units", "environment", "files", "par", "memory"]),
    (
        "weights",
        &[
            "units",
            "environment",
            "files",
            "finding",
            "par",
            "remote",
            "checkpoint",
            "mlx",
            "memory",
        ],
    ),
    (
        "profile",
        &[
            "units",
            "environment",
            "files",
            "finding",
            "par",
            "remote",
            "checkpoint",
            "mlx",
            "memory",
            "weights",
        ],
    ),
    (
        "worker",
        &[
            "units",
            "environment",
            "files",
            "finding",
            "par",
            "remote",
            "checkpoint",
            "mlx",
            "memory",
            "weights",
            "profile",
        ],
    ),
    (
        "app",
        &[
            "units",
            "environment",
            "files",
            "finding",
            "par",
            "remote",
            "checkpoint",
            "mlx",
            "memory",
            "weights",
            "profile",
            "worker",
        ],
    ),
    (
        "cli",
        &[
            "units",
            "environment",
            "files",
            "finding",
            "par",
            "remote",
            "checkpoint",
            "mlx",
            "memory",
            "weights",
            "profile",
            "worker",
        ],
    ),
];

/// Every `.rs` file below `dir`.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The layers `text` names through `crate::x` or `use crate::{x, …}`.
fn referenced(text: &str) -> Vec<String> {
    referenced_from(text, "crate::")
}

/// The modules of the library that `text` names after `root` (`crate::`
/// inside the library, `weightscope::` in the binary).
fn referenced_from(text: &str, root: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(root) {
        rest = &rest[at + root.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group, up to its matching brace.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            names.push(item);
        } else {
            names.push(
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    names
        .into_iter()
        .map(|n| n.trim().split("::").next().unwrap_or("").trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

#[test]
fn each_layer_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or("")
            .trim_end_matches(".rs");
        if matches!(first, "lib" | "main") {
            continue;
        }
        let allowed = ALLOWED
            .iter()
            .find(|(layer, _)| *layer == first)
            .unwrap_or_else(|| panic!("{} is in no layer: add it to ALLOWED", relative.display()))
            .1;
        let text = std::fs::read_to_string(file).expect("read");
        for name in referenced(&text) {
            if name != first
                && ALLOWED.iter().any(|(l, _)| *l == name)
                && !allowed.contains(&name.as_str())
            {
                violations.push(format!("{} uses crate::{name}", relative.display()));
            }
        }
        if first != "mlx" && (text.contains("mlx_rs::") || text.contains("mlx_sys::")) {
            violations.push(format!(
                "{} names mlx_rs or mlx_sys outside src/mlx",
                relative.display()
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "layering broken:\n{}",
        violations.join("\n")
    );
}

/// The profiler's rooms (docs/ARCHITECTURE.md): `capture` may use
/// `analysis` and `trace`, `analysis` only `trace` (and the walk's plan,
/// for a recording's expected peaks), `trace` none of them.
#[test]
fn the_profilers_rooms_import_only_the_rooms_after_them() {
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/profile");
    let forbidden: &[(&str, &[&str])] = &[
        ("analysis", &["capture", "export"]),
        ("trace", &["capture", "analysis", "walk", "export"]),
        // The viewers' formats read traces and analyses, and record nothing.
        ("export", &["capture", "walk"]),
        ("capture", &["export"]),
    ];
    let mut violations = Vec::new();
    for (room, banned) in forbidden {
        let mut files = Vec::new();
        rust_files(&profile.join(room), &mut files);
        assert!(!files.is_empty(), "no room {room}");
        for file in &files {
            let text = std::fs::read_to_string(file).expect("read");
            let inner = text.split("crate::profile::").skip(1).map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            });
            for name in inner {
                if banned.contains(&name.as_str()) {
                    violations.push(format!("{} uses profile::{name}", file.display()));
                }
            }
            for other in *banned {
                if text.contains(&format!("super::{other}")) {
                    violations.push(format!("{} uses super::{other}", file.display()));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "rooms crossed:\n{}",
        violations.join("\n")
    );
}

/// The binary only dispatches: the window to `app::shell`, every
/// subcommand to `cli` (which parses, runs and exits).
#[test]
fn main_only_dispatches_to_the_window_and_the_cli() {
    let main = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/main.rs");
    let text = std::fs::read_to_string(main).expect("read main.rs");
    let used = referenced_from(&text, "weightscope::");
    assert!(!used.is_empty(), "the scanner sees main's imports");
    let others: Vec<&String> = used
        .iter()
        .filter(|n| !matches!(n.as_str(), "app" | "cli"))
        .collect();
    assert!(
        others.is_empty(),
        "main.rs uses {others:?}: move that work into cli or app::shell"
    );
    assert!(
        text.lines().count() <= 40,
        "main.rs is {} lines: it only dispatches",
        text.lines().count()
    );
}

#[test]
fn the_scanner_sees_grouped_and_plain_imports() {
    let names = referenced(
        "use crate::{mlx::{self, Array}, weights::Weights};\nlet x = crate::units::human_bytes(1);",
    );
    assert_eq!(names, ["mlx", "weights", "units"]);
}

/// Panels own their state: a panel module (every file of `src/app` but the
/// app itself, its test hooks, the command bus, its threads and the eframe
/// shell) draws from its own struct and the inputs it is given, so it never
/// names the app struct, let alone adds methods to it that reach into other
/// panels' fields; and it pushes `AppCommand`s, never a worker command or a
/// cancel token of its own making.
#[test]
fn panels_never_reach_into_the_app() {
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/app");
    let mut files = Vec::new();
    rust_files(&app, &mut files);
    // Paths under src/app; a folder ends in `/`.
    let not_panels = [
        "mod.rs",
        "weightscope_app/",
        "shell.rs",
        "hooks.rs",
        "commands.rs",
        "background.rs",
    ];
    let panels: Vec<_> = files
        .iter()
        .filter(|f| {
            let inside = f
                .strip_prefix(&app)
                .expect("under src/app")
                .to_string_lossy();
            !not_panels.iter().any(|n| {
                if n.ends_with('/') {
                    inside.starts_with(n)
                } else {
                    inside == *n
                }
            })
        })
        .collect();
    let mut offenders = Vec::new();
    for file in &panels {
        let text = std::fs::read_to_string(file).expect("read");
        for banned in [
            "WeightscopeApp",
            "worker::Request",
            "Request::",
            "CancelToken::new",
        ] {
            if text.contains(banned) {
                offenders.push(format!("{} names {banned}", file.display()));
            }
        }
    }
    assert!(panels.len() > 8, "the panels were found");
    assert!(
        offenders.is_empty(),
        "panels reaching past their contract:\n{}",
        offenders.join("\n")
    );
}

/// The environment is read in one module (`src/environment.rs`): every
/// other layer asks it, so a variable is never read twice or half-checked.
#[test]
fn the_environment_is_read_in_one_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut offenders = Vec::new();
    for file in &files {
        if file.ends_with("environment.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read");
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["env::var(", "env::var_os(", "env::vars(", "env::vars_os("]
                .iter()
                .any(|read| code.contains(read))
            {
                offenders.push(format!("{}:{}", file.display(), i + 1));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "environment read outside environment.rs: {offenders:?}"
    );
}
