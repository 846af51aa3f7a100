//! A corpus of hostile checkpoints, generated here (nothing big is
//! committed): every validation case of the checkpoint layer and the nastier
//! ones. For each, the CLI exits 2 with one line naming the file and the
//! problem (or opens, for the legal-but-odd ones), and the window shows the
//! problem and stays usable. Nothing panics.

use crate::common;
use weightscope::app::AppCommand;

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use weightscope::app::WeightscopeApp;
use weightscope::mlx;

/// The checkpoint layer's cap on a header (`HEADER_CAP`).
const CAP: u64 = 100_000_000;

fn shard_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

fn write_shard(path: &Path, header: &str, data: &[u8]) {
    std::fs::write(path, shard_bytes(header, data)).expect("write shard");
}

fn f32_entry(name: &str, start: u64, end: u64, shape: &str) -> String {
    format!(
        "{}:{{\"dtype\":\"F32\",\"shape\":{shape},\"data_offsets\":[{start},{end}]}}",
        serde_json::to_string(name).expect("json")
    )
}

/// What opening a case should do.
enum Expect {
    /// Fails (whole or one shard) with a message containing this.
    Problem(&'static str),
    /// Opens (legal, however odd), with this many tensors.
    Opens(usize),
    /// The headers open (the CLI, this many tensors), but MLX refuses to
    /// map the file, so the window's open fails with this message.
    HeadersOnly(usize, &'static str),
}

struct Case {
    name: &'static str,
    /// Builds the case under a fresh folder; returns the path to open.
    build: fn(&Path) -> PathBuf,
    expect: Expect,
}

fn one_file(dir: &Path, header: &str, data: &[u8]) -> PathBuf {
    let path = dir.join("model.safetensors");
    write_shard(&path, header, data);
    path
}

/// A folder with shard `a.safetensors` holding `x` and this index text.
fn indexed(dir: &Path, index: &str) -> PathBuf {
    write_shard(
        &dir.join("a.safetensors"),
        &format!("{{{}}}", f32_entry("x", 0, 4, "[1]")),
        &[0; 4],
    );
    std::fs::write(dir.join("model.safetensors.index.json"), index).expect("write");
    dir.to_path_buf()
}

// One table of cases reads best as one list.
#[allow(clippy::too_many_lines)]
fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "shorter than 8 bytes",
            build: |d| {
                let p = d.join("model.safetensors");
                std::fs::write(&p, b"\x01\x02\x03").expect("write");
                p
            },
            expect: Expect::Problem("too short for a safetensors header"),
        },
        Case {
            name: "header length past the end",
            build: |d| {
                let p = d.join("model.safetensors");
                let mut bytes = 1000u64.to_le_bytes().to_vec();
                bytes.extend_from_slice(b"{}");
                std::fs::write(&p, bytes).expect("write");
                p
            },
            expect: Expect::Problem("runs past the end of the file"),
        },
        Case {
            name: "header exactly at the cap",
            build: |d| {
                // "{}" and spaces: legal JSON of exactly CAP bytes, no tensors.
                let mut header = String::from("{}");
                header.push_str(&" ".repeat(usize::try_from(CAP).expect("cap") - 2));
                one_file(d, &header, b"")
            },
            // MLX's own loader refuses a header this large.
            expect: Expect::HeadersOnly(0, "Invalid json header length"),
        },
        Case {
            name: "header one byte over the cap",
            build: |d| {
                let p = d.join("model.safetensors");
                let file = std::fs::File::create(&p).expect("create");
                std::io::Write::write_all(&mut &file, &(CAP + 1).to_le_bytes()).expect("write");
                // Sparse: the length is real, the bytes are never read.
                file.set_len(8 + CAP + 1).expect("set_len");
                p
            },
            expect: Expect::Problem("exceeds the 100000000-byte cap"),
        },
        Case {
            name: "header not UTF-8",
            build: |d| {
                let p = d.join("model.safetensors");
                let mut bytes = 4u64.to_le_bytes().to_vec();
                bytes.extend_from_slice(&[0x7b, 0xff, 0xfe, 0x7d]);
                std::fs::write(&p, bytes).expect("write");
                p
            },
            expect: Expect::Problem("header is not UTF-8"),
        },
        Case {
            name: "header not JSON",
            build: |d| one_file(d, "this is not json", b""),
            expect: Expect::Problem("header is not JSON"),
        },
        Case {
            name: "NaN offsets (not JSON)",
            build: |d| {
                one_file(
                    d,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[NaN,4]}}",
                    &[0; 4],
                )
            },
            expect: Expect::Problem("tensor `a`: expected value"),
        },
        Case {
            name: "not the safetensors shape",
            build: |d| one_file(d, "[1, 2, 3]", b""),
            expect: Expect::Problem("not a safetensors header"),
        },
        Case {
            name: "duplicate keys",
            build: |d| {
                let header = format!(
                    "{{{},{}}}",
                    f32_entry("a", 0, 4, "[1]"),
                    f32_entry("a", 4, 8, "[1]")
                );
                one_file(d, &header, &[0; 8])
            },
            expect: Expect::Problem("appears twice"),
        },
        Case {
            name: "unknown dtype",
            build: |d| {
                one_file(
                    d,
                    "{\"a\":{\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                    &[0; 4],
                )
            },
            expect: Expect::Problem("unknown dtype `F7`"),
        },
        Case {
            name: "negative offsets",
            build: |d| {
                one_file(
                    d,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,4]}}",
                    &[0; 4],
                )
            },
            expect: Expect::Problem("data_offsets must be two ascending integers"),
        },
        Case {
            name: "float offsets",
            build: |d| {
                one_file(
                    d,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}",
                    &[0; 4],
                )
            },
            expect: Expect::Problem("data_offsets must be two ascending integers"),
        },
        Case {
            name: "offsets past the data",
            build: |d| one_file(d, &format!("{{{}}}", f32_entry("a", 0, 8, "[2]")), &[0; 4]),
            expect: Expect::Problem("past its end"),
        },
        Case {
            name: "overlapping tensors",
            build: |d| {
                let header = format!(
                    "{{{},{}}}",
                    f32_entry("a", 0, 8, "[2]"),
                    f32_entry("b", 4, 12, "[2]")
                );
                one_file(d, &header, &[0; 12])
            },
            expect: Expect::Problem("overlap"),
        },
        Case {
            name: "a hole in the data",
            build: |d| {
                let header = format!(
                    "{{{},{}}}",
                    f32_entry("a", 0, 4, "[1]"),
                    f32_entry("b", 8, 12, "[1]")
                );
                one_file(d, &header, &[0; 12])
            },
            expect: Expect::Problem("belong to no tensor"),
        },
        Case {
            name: "bytes do not match dtype x shape",
            build: |d| one_file(d, &format!("{{{}}}", f32_entry("a", 0, 8, "[3]")), &[0; 8]),
            expect: Expect::Problem("needs 12"),
        },
        Case {
            name: "an enormous dimension",
            build: |d| {
                let header = format!(
                    "{{{}}}",
                    f32_entry("a", 0, 4, "[4611686018427387904,4611686018427387904]")
                );
                one_file(d, &header, &[0; 4])
            },
            expect: Expect::Problem("needs more than 2^64 bits"),
        },
        Case {
            name: "a zero dimension (legal)",
            build: |d| {
                let header = format!(
                    "{{{},{}}}",
                    f32_entry("empty", 0, 0, "[0,4]"),
                    f32_entry("x", 0, 4, "[1]")
                );
                one_file(d, &header, &[0; 4])
            },
            expect: Expect::Opens(2),
        },
        Case {
            name: "names with NUL, a line break and a right-to-left override (legal)",
            build: |d| {
                let header = format!(
                    "{{{},{},{}}}",
                    f32_entry("nul\u{0}name", 0, 4, "[1]"),
                    f32_entry("line\nbreak", 4, 8, "[1]"),
                    f32_entry("evil\u{202e}gnp.exe", 8, 12, "[1]")
                );
                one_file(d, &header, &[0; 12])
            },
            expect: Expect::Opens(3),
        },
        Case {
            name: "100k tiny tensors in one shard (legal)",
            build: |d| {
                let entries: Vec<String> = (0..100_000u64)
                    .map(|i| f32_entry(&format!("t.{i}"), i * 4, i * 4 + 4, "[1]"))
                    .collect();
                one_file(d, &format!("{{{}}}", entries.join(",")), &vec![0; 400_000])
            },
            expect: Expect::Opens(100_000),
        },
        Case {
            name: "a duplicate tensor across shards",
            build: |d| {
                write_shard(
                    &d.join("a.safetensors"),
                    &format!("{{{}}}", f32_entry("x", 0, 4, "[1]")),
                    &[0; 4],
                );
                write_shard(
                    &d.join("b.safetensors"),
                    &format!("{{{}}}", f32_entry("x", 0, 4, "[1]")),
                    &[0; 4],
                );
                d.to_path_buf()
            },
            expect: Expect::Problem("appears twice"),
        },
        Case {
            name: "an index that is not JSON",
            build: |d| indexed(d, "{ nope"),
            expect: Expect::Problem("index is not JSON"),
        },
        Case {
            name: "an index naming a missing shard",
            build: |d| {
                indexed(
                    d,
                    r#"{"weight_map": {"x": "a.safetensors", "y": "gone.safetensors"}}"#,
                )
            },
            expect: Expect::Problem("which does not exist"),
        },
        Case {
            name: "an index naming a tensor its shard lacks",
            build: |d| {
                indexed(
                    d,
                    r#"{"weight_map": {"x": "a.safetensors", "ghost": "a.safetensors"}}"#,
                )
            },
            expect: Expect::Problem("which does not hold it"),
        },
        Case {
            name: "an index listing one shard under two names",
            build: |d| {
                let header = format!(
                    "{{{},{}}}",
                    f32_entry("x", 0, 4, "[1]"),
                    f32_entry("y", 4, 8, "[1]")
                );
                write_shard(&d.join("a.safetensors"), &header, &[0; 8]);
                std::fs::write(
                    d.join("model.safetensors.index.json"),
                    r#"{"weight_map": {"x": "a.safetensors", "y": "./a.safetensors"}}"#,
                )
                .expect("write");
                d.to_path_buf()
            },
            expect: Expect::Problem("is not a file in the index's folder"),
        },
        Case {
            name: "an empty folder",
            build: Path::to_path_buf,
            expect: Expect::Problem("no .safetensors files"),
        },
        Case {
            name: "a shard that is a directory",
            build: |d| {
                std::fs::create_dir(d.join("model.safetensors")).expect("mkdir");
                d.to_path_buf()
            },
            expect: Expect::Problem("is a folder, not a regular file"),
        },
        Case {
            name: "a symlink loop",
            build: |d| {
                std::os::unix::fs::symlink(d.join("b.safetensors"), d.join("a.safetensors"))
                    .expect("link");
                std::os::unix::fs::symlink(d.join("a.safetensors"), d.join("b.safetensors"))
                    .expect("link");
                d.join("a.safetensors")
            },
            expect: Expect::Problem("cannot read"),
        },
        Case {
            // As root, permissions do not stop a read; a path through a file does.
            name: "a path that cannot be read",
            build: |d| {
                std::fs::write(d.join("plain-file"), b"x").expect("write");
                d.join("plain-file").join("model.safetensors")
            },
            expect: Expect::Problem("cannot read"),
        },
    ]
}

fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn the_cli_says_one_line_per_hostile_file_and_never_panics() {
    let _lock = common::mlx_memory_lock();
    for case in cases() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = (case.build)(dir.path());
        let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
            .arg("inspect")
            .arg(&path)
            .output()
            .expect("run weightscope");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{}: {stderr}", case.name);
        match case.expect {
            Expect::Problem(problem) => {
                assert_eq!(output.status.code(), Some(2), "{}: {stderr}", case.name);
                assert!(output.stdout.is_empty(), "{}: nothing on stdout", case.name);
                assert_eq!(
                    stderr.lines().count(),
                    1,
                    "{}: one line: {stderr}",
                    case.name
                );
                assert!(stderr.contains(problem), "{}: {stderr}", case.name);
                let named = stderr.contains(&file_name_of(&path))
                    || stderr.contains(&dir.path().display().to_string());
                assert!(named, "{}: the file is named: {stderr}", case.name);
            }
            Expect::Opens(count) | Expect::HeadersOnly(count, _) => {
                assert_eq!(output.status.code(), Some(0), "{}: {stderr}", case.name);
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    stdout.contains(&format!(
                        "tensors      {} ",
                        weightscope::units::grouped(count as u64)
                    )),
                    "{}: {count} tensors",
                    case.name
                );
                // No line a name could break or reorder.
                assert!(
                    !stdout.contains('\u{0}')
                        && !stdout.contains('\u{202e}')
                        && !stdout.contains("line\nbreak"),
                    "{}: names are escaped",
                    case.name
                );
            }
        }
    }
}

#[test]
fn the_window_shows_each_problem_and_stays_usable() {
    let _lock = common::mlx_memory_lock();
    let app = WeightscopeApp::new(None, mlx::default_device(), || {}).expect("app");
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 860.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), app);
    let keep = tempfile::tempdir().expect("tempdir");
    for (i, case) in cases().into_iter().enumerate() {
        let dir = keep.path().join(format!("case-{i}"));
        std::fs::create_dir(&dir).expect("mkdir");
        let path = (case.build)(&dir);
        harness.state_mut().execute(AppCommand::Open(path));
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("the worker answers");
        harness.run();
        match case.expect {
            Expect::Problem(problem) | Expect::HeadersOnly(_, problem) => {
                assert!(
                    harness
                        .query_all_by_label_contains(problem)
                        .next()
                        .is_some(),
                    "{}: the window shows `{problem}`",
                    case.name
                );
            }
            Expect::Opens(count) => {
                let shown = format!("of {count} tensors");
                assert!(
                    harness.query_all_by_label_contains(&shown).next().is_some(),
                    "{}: {shown}",
                    case.name
                );
                assert!(harness.query_by_label_contains("\u{202e}gnp").is_none() || count != 3);
            }
        }
    }
    // Still usable: a good checkpoint opens and a tensor materializes.
    let good = keep.path().join("good");
    std::fs::create_dir(&good).expect("mkdir");
    common::write_safetensors(
        &good.join("m.safetensors"),
        &[common::Tensor::f32("fine", &[2], &[1.0, 3.0])],
    );
    harness.state_mut().execute(AppCommand::Open(good));
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("opened");
    harness
        .state_mut()
        .execute(AppCommand::Materialize("fine".into()));
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    harness.get_by_label("mean");
}

/// Whether `text` holds a character that can hide, reorder or break text.
fn raw_hostile(text: &str) -> bool {
    text.chars().any(|c| {
        c.is_control()
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200b}'..='\u{200f}' | '\u{feff}' | '\u{2028}' | '\u{2029}')
    })
}

/// The labels (and values) of the window holding a hostile character raw;
/// text fields (a path the person typed or chose, to edit) left out.
fn raw_labels(harness: &Harness<'_, WeightscopeApp>) -> Vec<String> {
    harness
        .query_all(egui_kittest::kittest::By::new().predicate(|node| {
            // A text field holds what the person typed or chose (the
            // path itself, to edit), not text the window shows.
            let input = |role| {
                matches!(
                    role,
                    egui::accesskit::Role::TextInput | egui::accesskit::Role::MultilineTextInput
                )
            };
            let field = input(node.role()) || node.parent().is_some_and(|p| input(p.role()));
            !field
                && (node.label().is_some_and(|l| raw_hostile(&l))
                    || node.value().is_some_and(|v| raw_hostile(&v)))
        }))
        .map(|node| {
            use egui_kittest::kittest::NodeT as _;
            let inner = node.accesskit_node();
            format!("{:?} {:?} {:?}", inner.role(), inner.label(), inner.value())
        })
        .collect()
}

#[test]
fn no_label_of_the_window_shows_a_hostile_character_raw() {
    let _lock = common::mlx_memory_lock();
    let keep = tempfile::tempdir().expect("tempdir");
    let model = keep.path().join("m\u{202e}\u{200b}");
    std::fs::create_dir(&model).expect("mkdir");
    let names = [
        "esc\u{1b}[31m.weight",
        "evil\u{202e}gnp.weight",
        "q\u{200b}_proj.weight",
        "z\u{200d}wj.weight",
        "bom\u{feff}.weight",
        "line\u{2028}sep.weight",
        "para\u{2029}sep.weight",
        "two\nlines.weight",
    ];
    let tensors: Vec<common::Tensor> = names
        .iter()
        .map(|n| common::Tensor::f32(n, &[2, 2], &[1.0, -1.0, 0.5, 2.0]))
        .collect();
    common::write_safetensors(&model.join("model.safetensors"), &tensors);
    let app = WeightscopeApp::new(None, mlx::default_device(), || {}).expect("app");
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 860.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), app);
    harness.state_mut().execute(AppCommand::Open(model));
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("opened");
    harness.run();
    for name in names {
        harness
            .state_mut()
            .execute(AppCommand::Materialize(name.into()));
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("materialized");
        harness.run();
        let raw = raw_labels(&harness);
        assert!(
            raw.is_empty(),
            "{name:?}: labels with raw characters: {raw:?}"
        );
    }
    // The profiler after a walk (its events name the tensors), the check
    // tab after a value scan.
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(weightscope::app::Tab::Profiler));
    harness.state_mut().execute(AppCommand::Walk {
        policy: weightscope::memory::Policy::ReleaseTensor,
        transform: weightscope::profile::Transform::None,
    });
    harness.step();
    harness.step();
    crate::wait_while(&mut harness, |h| h.is_walking());
    // The profiler's live strip keeps drawing: frames, not `run`.
    harness.run_steps(8);
    let raw = raw_labels(&harness);
    assert!(
        raw.is_empty(),
        "profiler: labels with raw characters: {raw:?}"
    );
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(weightscope::app::Tab::Check));
    harness.state_mut().execute(AppCommand::ScanValues);
    harness.step();
    crate::wait_while(&mut harness, |h| h.is_checking_values());
    harness.run_steps(8);
    let raw = raw_labels(&harness);
    assert!(raw.is_empty(), "check: labels with raw characters: {raw:?}");
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(weightscope::app::Tab::Tensors));
    harness.run_steps(8);
    // The inspector names the selected tensor, escaped.
    assert!(
        harness
            .query_all_by_label_contains("\\u{2028}")
            .next()
            .is_some()
            || harness
                .query_all_by_label_contains("\\u{2029}")
                .next()
                .is_some()
    );
}

/// Journals merged whose host names (from the files) hold hostile
/// characters: the merged view, its "Shown whole" list and the overlays
/// show them escaped.
#[test]
fn merged_journals_from_a_hostile_host_are_shown_escaped() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let recorded = dir.path().join("job.jsonl");
    let jobs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/jobs.py");
    let out = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("record")
        .arg("--trace")
        .arg(&recorded)
        .arg("--")
        .arg(common::venv_python())
        .arg(jobs)
        .arg("phases")
        .output()
        .expect("record");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&recorded).expect("journal");
    let (first, rest) = text.split_once('\n').expect("lines");
    let journals: Vec<PathBuf> = (0..2u32)
        .map(|rank| {
            let mut meta: serde_json::Value = serde_json::from_str(first).expect("meta");
            meta["origin"]["host"] = format!("evil\u{202e}gnp\nhost\u{1b}[31m{rank}").into();
            meta["origin"]["rank"] = rank.into();
            let path = dir.path().join(format!("rank{rank}.jsonl"));
            std::fs::write(&path, format!("{meta}\n{rest}")).expect("write");
            path
        })
        .collect();
    let app = WeightscopeApp::new(None, mlx::default_device(), || {}).expect("app");
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), app);
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(weightscope::app::Tab::Profiler));
    harness
        .state_mut()
        .picked_for(weightscope::app::Dialog::OpenTrace, journals);
    harness.step();
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("merged 2 journals of one job");
    harness.get_by_label("Shown whole").click();
    harness.run();
    let raw = raw_labels(&harness);
    assert!(
        raw.is_empty(),
        "merged view: labels with raw characters: {raw:?}"
    );
}
