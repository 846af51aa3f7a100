//! `weightscope check PATH [--json] [--values]`: what is wrong with a
//! checkpoint that opens, with an exit status a CI job can use (0: no error,
//! 1: errors, 2: it cannot be opened at all).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::checkpoint::check::check_headers;
use crate::finding::{Finding, Severity};
use crate::units::{Shown, human_bytes};
use crate::weights::{MlxLoader, ValueScan, Weights, scan_values};

/// What `weightscope check` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CheckArgs {
    /// A folder, one `.safetensors` or `.gguf` file, a Hub repo (`hf://ORG/REPO[@REV]`) or an `https://` address of one file.
    pub path: PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also read every tensor's values (NaN/Inf, all-zero tensors, bad scales).
    #[arg(long)]
    pub values: bool,
}

/// The findings of one check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    /// The checkpoint checked.
    pub path: String,
    /// Every finding, errors first.
    pub findings: Vec<Finding>,
    /// Findings of severity error.
    pub errors: usize,
    /// Findings of severity warning.
    pub warnings: usize,
    /// Findings of severity info.
    pub infos: usize,
    /// The value scan, when `--values` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<ValuesSummary>,
}

/// How the value scan went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValuesSummary {
    /// Tensors read.
    pub scanned: usize,
    /// Of them, those that could not be read (`values.unreadable`).
    pub unreadable: usize,
    /// Tensors to read.
    pub total: usize,
    /// Whether it stopped early.
    pub cancelled: bool,
    /// MLX's peak active memory.
    pub peak_mlx_active_bytes: u64,
    /// The bound the shard releases keep it within.
    pub bound_bytes: u64,
}

impl CheckReport {
    /// A report of `findings` (sorted errors first here).
    #[must_use]
    pub fn new(path: &Path, mut findings: Vec<Finding>, values: Option<&ValueScan>) -> Self {
        findings.sort_by_key(|f| f.severity);
        let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        Self {
            path: crate::units::location_data(&path.to_string_lossy()),
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            infos: count(Severity::Info),
            values: values.map(|v| ValuesSummary {
                scanned: v.scanned,
                unreadable: v.unreadable(),
                total: v.total,
                cancelled: v.cancelled,
                peak_mlx_active_bytes: v.peak_mlx_active_bytes,
                bound_bytes: v.bound_bytes,
            }),
            findings,
        }
    }

    /// The exit status: 1 with errors, else 0.
    #[must_use]
    pub fn exit_status(&self) -> u8 {
        u8::from(self.errors > 0)
    }
}

/// Runs the check (header findings; with `--values`, the value scan with a
/// progress line on stderr when it is a terminal).
///
/// # Errors
/// When the checkpoint cannot be opened at all (one line naming the file).
pub fn run(args: &CheckArgs) -> Result<CheckReport, super::CliError> {
    let checkpoint = super::open_checkpoint(&args.path)?;
    if let Some(&problem) = checkpoint.fatal_problems().first() {
        return Err(problem.clone().into());
    }
    let summary = checkpoint.summary();
    let mut findings = check_headers(&checkpoint, &summary);

    let mut scan = None;
    if args.values {
        // A shard MLX cannot load (a dtype it refuses) is a finding: the
        // header findings still stand.
        let mut weights = match Weights::open_with(checkpoint, MlxLoader) {
            Ok(weights) => weights,
            Err(err) => {
                findings.push(crate::checkpoint::check::finding(
                    "values.unreadable",
                    format!("the values cannot be read through MLX: {err}"),
                ));
                return Ok(CheckReport::new(&args.path, findings, None));
            }
        };
        let cancel = AtomicBool::new(false);
        let terminal = std::io::stderr().is_terminal();
        let mut last = Instant::now();
        let done = scan_values(&mut weights, &cancel, &mut |p| {
            if terminal && last.elapsed() >= Duration::from_millis(100) {
                last = Instant::now();
                eprint!("\rcheck: {}/{} tensors read   ", p.done, p.total);
            }
        });
        if terminal {
            eprintln!();
        }
        findings.extend(done.findings.iter().cloned());
        scan = Some(done);
    }
    Ok(CheckReport::new(&args.path, findings, scan.as_ref()))
}

/// Findings of one code the text prints before it sums up the rest.
const PER_CODE: usize = 8;

/// The report for people: one line per finding (at most eight per code,
/// then how many more), then the counts.
///
/// # Errors
/// When `out` fails.
pub fn write_text(report: &CheckReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "check {}", Shown::new(&report.path))?;
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    let mut hidden: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &report.findings {
        let seen = shown.entry(f.code).or_insert(0);
        *seen += 1;
        if *seen > PER_CODE {
            *hidden.entry(f.code).or_insert(0) += 1;
            continue;
        }
        let place = match (&f.subject.tensor, &f.subject.file) {
            (Some(t), Some(file)) => format!("  [{} in {}]", Shown::new(t), Shown::new(file)),
            (Some(t), None) => format!("  [{}]", Shown::new(t)),
            (None, Some(file)) => format!("  [{}]", Shown::new(file)),
            (None, None) => String::new(),
        };
        writeln!(
            out,
            "{:<8}{:<26}{}{place}",
            f.severity.name(),
            f.code,
            Shown::new(&f.message)
        )?;
    }
    for (code, n) in hidden {
        writeln!(out, "        {code:<26}… {n} more (--json lists all)")?;
    }
    if let Some(v) = &report.values {
        writeln!(
            out,
            "values: {} of {} tensors read{}{}, peak MLX active {} (bound {})",
            v.scanned,
            v.total,
            if v.unreadable > 0 {
                format!(" ({} could not be read)", v.unreadable)
            } else {
                String::new()
            },
            if v.cancelled { " (cancelled)" } else { "" },
            human_bytes(v.peak_mlx_active_bytes),
            human_bytes(v.bound_bytes)
        )?;
    }
    writeln!(
        out,
        "{} error{}, {} warning{}, {} info{}",
        report.errors,
        if report.errors == 1 { "" } else { "s" },
        report.warnings,
        if report.warnings == 1 { "" } else { "s" },
        report.infos,
        if report.values.is_none() {
            " (headers only; --values reads every tensor)"
        } else {
            ""
        }
    )
}

/// `weightscope check`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &CheckArgs) -> u8 {
    use std::io::Write as _;
    let Some(report) = super::ok_or_said(run(args)) else {
        return super::BAD_INPUT;
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        super::json_line(&mut out, &report)
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        write_text(&report, &mut shown).and_then(|()| shown.finish().map(drop))
    };
    if let Err(code) = super::output_status(written.and_then(|()| out.flush())) {
        return code;
    }
    report.exit_status()
}
