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
    // Issue #71: what a list of refused characters missed.
    ("variation selector", "q_proj\u{fe0f}"),
    ("Hangul filler", "q_pr\u{3164}oj"),
    ("braille blank", "q_proj\u{2800}"),
    ("musical invisible", "q_\u{1d173}proj"),
    ("Khmer invisible", "q\u{17b4}_proj"),
    ("C1 CSI", "csi\u{9b}31m"),
    ("delete", "del\u{7f}x"),
];

/// Whether `said` holds, raw, any character outside the safe set (held
/// against the UCD by `the_safe_set_is_unicodes_own_for_every_code_point`)
/// other than the line breaks and tabs of the output's own layout.
fn raw_hostile(said: &str) -> Option<char> {
    said.chars()
        .find(|&c| c != '\n' && c != '\t' && !weightscope::units::shown_as_itself(c))
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

/// The tensor names `inspect --json` gives for `model`, as a JSON reader
/// decodes them, and the JSON as printed.
fn json_names(model: &Path) -> (Vec<String>, String) {
    let (said, output) = run(&["inspect".as_ref(), "--json".as_ref(), model.as_os_str()]);
    let doc: Value = serde_json::from_slice(&output.stdout).expect(&said);
    let names = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    (names, text(&output.stdout))
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
        "\\u{fe0f}",
        "\\u{3164}",
        "\\u{2800}",
        "\\u{1d173}",
        "\\u{17b4}",
        "\\u{9b}",
        "\\u{7f}",
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
    let (names, _) = json_names(&model);
    assert!(
        names.contains(&"q\u{200b}_proj.weight".to_owned()),
        "{names:?}"
    );
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

/// The safe set, walked whole: for every code point, `shown_as_itself`
/// against the Unicode character database as the `regex` package (its
/// own tables, not ICU's) holds it: general categories L, M, N, P, S and
/// the space, minus `Default_Ignorable_Code_Point`, `Bidi_Control`, Cf and
/// U+2800. Where the two databases are of different Unicode versions, a
/// code point ICU does not know yet (unassigned there) is escaped here
/// while the newer tables call it a letter: the one difference allowed,
/// in the safe direction.
#[test]
fn the_safe_set_is_unicodes_own_for_every_code_point() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/unicode/safe_set.py");
    let output = std::process::Command::new(crate::common::venv_python())
        .arg(&script)
        .output()
        .expect("runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listing = text(&output.stdout);
    let mut safe = vec![false; 0x11_0000];
    for line in listing.lines().filter(|l| !l.starts_with("regex")) {
        let (start, end) = line.split_once(' ').expect("START END");
        let start = usize::from_str_radix(start, 16).expect("hex");
        let end = usize::from_str_radix(end, 16).expect("hex");
        for slot in &mut safe[start..=end] {
            *slot = true;
        }
    }
    let mut newer_only = 0_u32;
    let mut wrong = Vec::new();
    for cp in 0..0x11_0000_u32 {
        let theirs = safe[cp as usize];
        let Some(c) = char::from_u32(cp) else {
            assert!(!theirs, "a surrogate U+{cp:04X} is safe to them");
            continue;
        };
        let ours = weightscope::units::shown_as_itself(c);
        if ours == theirs {
            continue;
        }
        if theirs && !ours && unassigned_in_icu(c) {
            newer_only += 1;
            continue;
        }
        wrong.push(format!("U+{cp:04X} ours {ours} theirs {theirs}"));
    }
    assert!(
        wrong.is_empty(),
        "{} code points disagree with the UCD (first: {:?})",
        wrong.len(),
        &wrong[..wrong.len().min(20)]
    );
    eprintln!(
        "{} code points are safe to {}; {newer_only} of them are assigned only in its newer tables",
        safe.iter().filter(|s| **s).count(),
        listing.lines().last().unwrap_or("")
    );
    // The classes the attacks used are escaped, the everyday ones kept.
    for hidden in [
        '\u{fe0f}',
        '\u{e0100}',
        '\u{3164}',
        '\u{115f}',
        '\u{ffa0}',
        '\u{2800}',
        '\u{1d173}',
        '\u{17b4}',
        '\u{17b5}',
        '\u{9b}',
        '\u{7f}',
        '\u{202e}',
        '\u{2066}',
        '\u{200b}',
        '\u{3000}',
        '\u{a0}',
        '\u{e000}',
        '\u{ad}',
        '\u{180e}',
    ] {
        assert!(
            !weightscope::units::shown_as_itself(hidden),
            "U+{:04X}",
            hidden as u32
        );
    }
    for plain in [
        'a', ' ', '~', 'é', '日', 'ß', '€', '—', '…', 'ж', '\u{301}', '😀',
    ] {
        assert!(weightscope::units::shown_as_itself(plain), "{plain}");
    }
}

/// Whether ICU's tables (which `shown_as_itself` reads) have no character
/// at `c` (general category Cn).
fn unassigned_in_icu(c: char) -> bool {
    use icu_properties::CodePointMapData;
    use icu_properties::props::GeneralCategory;
    CodePointMapData::<GeneralCategory>::new().get(c) == GeneralCategory::Unassigned
}

/// JSON and CSV carry no character outside the safe set raw: JSON as `\u`
/// escapes that decode to the exact name, CSV (a terminal may be its
/// reader: `--csv /dev/stdout`) as shown text.
#[test]
fn json_and_csv_outputs_carry_nothing_outside_the_safe_set_raw() {
    let dir = tempfile::tempdir().expect("dir");
    let model = hostile_model(dir.path());
    let m = model.as_os_str();
    let name = format!("{}.weight", HOSTILE[0].1);
    let runs: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["inspect".as_ref(), "--json".as_ref(), m],
        vec!["check".as_ref(), "--json".as_ref(), m],
        vec!["diff".as_ref(), "--json".as_ref(), m, m],
        vec!["tensor".as_ref(), "--json".as_ref(), m, name.as_ref()],
        vec![
            "walk".as_ref(),
            "--policy".as_ref(),
            "release-shard".as_ref(),
            "--csv".as_ref(),
            "/dev/stdout".as_ref(),
            m,
        ],
        vec![
            "walk".as_ref(),
            "--policy".as_ref(),
            "retain".as_ref(),
            "--json".as_ref(),
            m,
        ],
    ];
    for args in &runs {
        let (said, output) = run(args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {said}");
        let stdout = text(&output.stdout);
        assert_eq!(raw_hostile(&stdout), None, "{args:?}: {stdout}");
    }
    // The names decode exactly, DEL, C1 CSI and the override included.
    let (names, printed) = json_names(&model);
    for (class, name) in HOSTILE {
        assert!(
            names.contains(&format!("{name}.weight")),
            "{class}: {names:?}"
        );
    }
    assert!(printed.contains("\\u009b"), "C1 CSI as \\u009b");
    assert!(printed.contains("\\u007f"), "DEL as \\u007f");
}

/// Names that look alike on a terminal are told apart, and "did you mean"
/// shows which it means.
#[test]
fn look_alike_names_are_told_apart_everywhere() {
    let dir = tempfile::tempdir().expect("dir");
    let model = dir.path().join("m");
    std::fs::create_dir_all(&model).expect("mkdir");
    let look_alikes = [
        "model.q_proj.weight",
        "model.q_proj.weight\u{fe0f}",
        "model.q_proj\u{2800}.weight",
        "model.q\u{3164}_proj.weight",
        "model.q_proj.\u{17b5}weight",
    ];
    let tensors: Vec<Tensor> = look_alikes
        .iter()
        .map(|n| Tensor::f32(n, &[1], &[1.0]))
        .collect();
    write_safetensors(&model.join("model.safetensors"), &tensors);
    let (said, output) = run(&["inspect".as_ref(), model.as_os_str()]);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert_eq!(raw_hostile(&said), None, "{said}");
    let shown: Vec<String> = look_alikes
        .iter()
        .map(|n| weightscope::units::Shown::new(n).into_string())
        .collect();
    for name in &shown {
        assert!(said.contains(name.as_str()), "{name}: {said}");
    }
    let distinct: std::collections::HashSet<&String> = shown.iter().collect();
    assert_eq!(distinct.len(), look_alikes.len(), "{shown:?}");
    let (said, output) = run(&[
        "tensor".as_ref(),
        model.as_os_str(),
        "model.q_proj.weigh\u{200b}t".as_ref(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert_eq!(raw_hostile(&said), None, "{said}");
}

/// The cache warning names a folder whose name holds an OSC sequence (a
/// terminal title change) as shown text.
#[test]
fn the_cache_warning_shows_the_folders_name() {
    let dir = tempfile::tempdir().expect("dir");
    let model = dir.path().join("m");
    std::fs::create_dir_all(&model).expect("mkdir");
    write_safetensors(
        &model.join("model.safetensors"),
        &[Tensor::f32("w", &[1], &[1.0])],
    );
    let hub = crate::common::hub::Hub::start();
    hub.add("org/repo", &model, crate::common::hub::Behaviour::Normal);
    let cache = dir.path().join("cache\u{1b}]0;pwned\u{7}");
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    let output = weightscope()
        .args(["inspect", "hf://org/repo"])
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("WEIGHTSCOPE_CACHE_DIR", &cache)
        .env("HF_HOME", dir.path().join("no-hf-home"))
        .output()
        .expect("runs");
    let said = text(&output.stderr);
    assert!(said.contains("not using the cache"), "{said}");
    assert_eq!(raw_hostile(&said), None, "{said}");
    assert!(said.contains("\\u{1b}]0;pwned\\u{7}"), "{said}");
}

/// A mistake on the command line quotes what was typed: shown text too
/// (clap strips escape sequences only when stderr is not a terminal).
#[test]
fn a_mistyped_argument_is_quoted_as_shown_text() {
    let (said, output) = run(&[
        "walk".as_ref(),
        "--policy".as_ref(),
        "re\u{200b}tain\u{9b}\u{2800}".as_ref(),
        "x".as_ref(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert_eq!(raw_hostile(&said), None, "{said}");
    assert!(said.contains("re\\u{200b}tain"), "{said}");
}
