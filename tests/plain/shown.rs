//! One way to show text (issue #56): every hostile character class and a
//! `user:password@` address through every command's text and `--json`
//! output, and into traces.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::attack::{text, weightscope};
use crate::common::{Tensor, write_safetensors};

/// One name for each class of character that can hide, reorder or break
/// text on a screen.
const HOSTILE: &[(&str, &str)] = &[
    ("control", "esc\u{1b}[31m"),
    ("line break", "two\nlines"),
    ("bidi override", "evil\u{202e}gnp"),
    ("bidi isolate", "iso\u{2066}late"),
    ("zero-width space", "q\u{200b}_proj"),
    ("zero-width joiner", "z\u{200d}wj"),
    ("byte order mark", "bom\u{feff}"),
    ("line separator", "line\u{2028}sep"),
    ("paragraph separator", "para\u{2029}sep"),
];

/// Whether `said` holds any hostile character raw.
fn raw_hostile(said: &str) -> Option<char> {
    said.chars().find(|&c| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200b}'..='\u{200f}' | '\u{feff}' | '\u{2028}' | '\u{2029}')
    })
}

/// A checkpoint in a folder with a hostile name, one tensor per class.
fn hostile_model(dir: &Path) -> PathBuf {
    let model = dir.join("model\u{202e}\u{200b}x");
    std::fs::create_dir_all(&model).expect("mkdir");
    let tensors: Vec<Tensor> = HOSTILE
        .iter()
        .map(|(_, name)| Tensor::f32(&format!("{name}.weight"), &[2, 2], &[1.0, -1.0, 0.5, 2.0]))
        .collect();
    write_safetensors(&model.join("model.safetensors"), &tensors);
    model
}

fn run(args: &[&std::ffi::OsStr]) -> (String, std::process::Output) {
    let output = weightscope().args(args).output().expect("runs");
    let said = text(&output.stdout) + &text(&output.stderr);
    (said, output)
}

#[test]
fn hostile_names_reach_no_terminal_raw() {
    let dir = tempfile::tempdir().expect("dir");
    let model = hostile_model(dir.path());
    let m = model.as_os_str();
    let name = format!("{}.weight", HOSTILE[4].1);
    let mut runs: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["inspect".as_ref(), m],
        vec!["check".as_ref(), m],
        vec!["check".as_ref(), "--values".as_ref(), m],
        vec!["diff".as_ref(), m, m],
        vec![
            "walk".as_ref(),
            "--policy".as_ref(),
            "release-shard".as_ref(),
            m,
        ],
        vec!["tensor".as_ref(), m, name.as_ref()],
        vec!["tensor".as_ref(), m, "no\u{200b}such".as_ref()],
    ];
    runs.push(vec![
        "inspect".as_ref(),
        "/nowhere\u{202e}\u{2028}/x".as_ref(),
    ]);
    for args in &runs {
        let (said, output) = run(args);
        assert!(
            output.status.code().is_some_and(|c| c <= 2),
            "{args:?}: {said}"
        );
        assert_eq!(
            raw_hostile(&said),
            None,
            "{args:?} printed a raw character:\n{said}"
        );
    }
    // A job's command line, recorded and reported.
    let journal = dir.path().join("job.jsonl");
    let (said, output) = run(&[
        "record".as_ref(),
        "--trace".as_ref(),
        journal.as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        ":".as_ref(),
        "arg\u{202e}\u{200b}\u{2028}x".as_ref(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert_eq!(
        raw_hostile(&said),
        None,
        "record printed a raw character:\n{said}"
    );
    let (said, output) = run(&["report".as_ref(), journal.as_os_str()]);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert_eq!(
        raw_hostile(&said),
        None,
        "report printed a raw character:\n{said}"
    );
    assert!(said.contains("\\u{202e}"), "{said}");
    // Every class is shown as an escape that tells the names apart.
    let (said, _) = run(&["inspect".as_ref(), m]);
    for escape in [
        "\\u{200b}",
        "\\u{202e}",
        "\\u{2028}",
        "\\u{feff}",
        "\\u{200d}",
    ] {
        assert!(said.contains(escape), "{escape}: {said}");
    }
}

#[test]
fn messages_in_json_meant_for_people_are_shown_text() {
    let dir = tempfile::tempdir().expect("dir");
    let model = hostile_model(dir.path());
    let (said, output) = run(&["check".as_ref(), "--json".as_ref(), model.as_os_str()]);
    let report: Value = serde_json::from_slice(&output.stdout).expect(&said);
    for finding in report["findings"].as_array().expect("findings") {
        let message = finding["message"].as_str().expect("message");
        assert_eq!(raw_hostile(message), None, "{message}");
    }
    // Names as data stay exact (a script matches them).
    let (said, output) = run(&["inspect".as_ref(), "--json".as_ref(), model.as_os_str()]);
    let doc: Value = serde_json::from_slice(&output.stdout).expect(&said);
    let names: Vec<&str> = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"q\u{200b}_proj.weight"), "{names:?}");
}

#[test]
fn passwords_in_addresses_reach_no_output_nor_trace() {
    let dir = tempfile::tempdir().expect("dir");
    let model = dir.path().join("m");
    std::fs::create_dir_all(&model).expect("mkdir");
    write_safetensors(
        &model.join("model.safetensors"),
        &[Tensor::f32(
            "lm_head.weight",
            &[2, 2],
            &[1.0, 2.0, 3.0, 4.0],
        )],
    );
    let hub = crate::common::hub::Hub::start();
    hub.add("org/repo", &model, crate::common::hub::Behaviour::Normal);
    let endpoint = hub.endpoint.trim_end_matches('/');
    let url = endpoint.replacen("://", "://user:PASSWORD@", 1)
        + "/org/repo/resolve/main/model.safetensors";
    let cache = dir.path().join("cache");
    let csv = dir.path().join("walk.csv");
    let trace = dir.path().join("walk.json");
    let u: &std::ffi::OsStr = url.as_ref();
    let runs: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["inspect".as_ref(), u],
        vec!["inspect".as_ref(), "--json".as_ref(), u],
        vec!["check".as_ref(), u],
        vec!["check".as_ref(), "--json".as_ref(), u],
        vec!["diff".as_ref(), u, u],
        vec!["diff".as_ref(), "--json".as_ref(), u, u],
        vec!["walk".as_ref(), "--policy".as_ref(), "retain".as_ref(), u],
        vec![
            "walk".as_ref(),
            "--policy".as_ref(),
            "retain".as_ref(),
            "--json".as_ref(),
            "--csv".as_ref(),
            csv.as_os_str(),
            "--trace".as_ref(),
            trace.as_os_str(),
            u,
        ],
        vec!["tensor".as_ref(), u, "lm_head.weight".as_ref()],
        vec![
            "tensor".as_ref(),
            "--json".as_ref(),
            u,
            "lm_head.weight".as_ref(),
        ],
    ];
    for args in &runs {
        let output = weightscope()
            .args(args)
            .env("WEIGHTSCOPE_CACHE_DIR", &cache)
            .env("HF_HOME", dir.path().join("no-hf-home"))
            .output()
            .expect("runs");
        let said = text(&output.stdout) + &text(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {said}");
        assert!(!said.contains("PASSWORD"), "{args:?}: {said}");
    }
    for file in [&csv, &trace] {
        let written = std::fs::read_to_string(file).expect("written");
        assert!(
            !written.contains("PASSWORD"),
            "{}: {written}",
            file.display()
        );
        assert!(written.contains("user:***@"), "{}", file.display());
    }
}
