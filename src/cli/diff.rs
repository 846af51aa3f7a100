//! `weightscope diff A B`: tensors only in A, only in B, changed (shape or
//! dtype), and for the rest the largest absolute difference and the relative
//! error, computed on MLX one tensor at a time with shards released as the
//! walk leaves them.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::checkpoint::Checkpoint;
use crate::units::human_bytes;
use crate::weights::{DiffReport, MlxNative, ViewChoice, Weights};

/// What `weightscope diff` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffArgs {
    /// The first checkpoint.
    pub a: PathBuf,
    /// The second checkpoint.
    pub b: PathBuf,
    /// A's view.
    pub view_a: ViewChoice,
    /// B's view.
    pub view_b: ViewChoice,
    /// JSON instead of text.
    pub json: bool,
}

/// Opens one side with its view; a bad shard anywhere is refused (as
/// `inspect` refuses it), so a diff never silently skips tensors.
///
/// # Errors
/// One line naming the file and the problem.
fn open_side(path: &std::path::Path, choice: &ViewChoice) -> Result<Weights, String> {
    let checkpoint = Checkpoint::open(path).map_err(|e| e.to_string())?;
    if let Some(problem) = super::inspect::fatal_problems(&checkpoint).first() {
        return Err(problem.to_string());
    }
    let mut weights = Weights::open_with(checkpoint, MlxNative).map_err(|e| e.to_string())?;
    weights.install_choice(choice).map_err(|e| e.to_string())?;
    Ok(weights)
}

/// Runs the diff, with a progress line on stderr when it is a terminal.
///
/// # Errors
/// A side that cannot be opened, or whose view cannot be installed (one line).
pub fn run(args: &DiffArgs) -> Result<DiffReport, String> {
    let mut a = open_side(&args.a, &args.view_a)?;
    let mut b = open_side(&args.b, &args.view_b)?;
    let cancel = AtomicBool::new(false);
    let terminal = std::io::stderr().is_terminal();
    let mut last = Instant::now();
    let report = crate::weights::diff(&mut a, &mut b, &cancel, &mut |p| {
        if terminal && last.elapsed() >= Duration::from_millis(100) {
            last = Instant::now();
            eprint!("\rdiff: {}/{} tensors   ", p.done, p.total);
        }
    });
    if terminal {
        eprintln!();
    }
    Ok(report)
}

/// The JSON report (`only_in_a`, `only_in_b`, `changed`, `common`, …).
#[must_use]
pub fn to_json(args: &DiffArgs, report: &DiffReport) -> serde_json::Value {
    let mut value = serde_json::to_value(report).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("a".into(), args.a.display().to_string().into());
        map.insert("b".into(), args.b.display().to_string().into());
    }
    value
}

/// The text report: counts, then the tensors that differ most.
///
/// # Errors
/// When `out` fails.
pub fn write_text(
    args: &DiffArgs,
    report: &DiffReport,
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(out, "A: {}", args.a.display())?;
    writeln!(out, "B: {}", args.b.display())?;
    let differing: Vec<_> = report.differing().collect();
    writeln!(
        out,
        "{} compared ({} differ), {} only in A, {} only in B, {} changed shape or dtype, {} failed",
        report.common.len(),
        differing.len(),
        report.only_in_a.len(),
        report.only_in_b.len(),
        report.changed.len(),
        report.failed.len()
    )?;
    writeln!(
        out,
        "peak MLX active {} (largest shard of A + of B: {}), {:.2} s{}",
        human_bytes(report.peak_mlx_active_bytes),
        human_bytes(report.two_shards_bytes),
        report.elapsed_secs,
        if report.cancelled { ", cancelled" } else { "" }
    )?;
    for name in report.only_in_a.iter().take(20) {
        writeln!(out, "only in A: {name}")?;
    }
    for name in report.only_in_b.iter().take(20) {
        writeln!(out, "only in B: {name}")?;
    }
    for c in report.changed.iter().take(20) {
        writeln!(
            out,
            "changed: {} {} {:?} -> {} {:?}",
            c.name, c.a_dtype, c.a_shape, c.b_dtype, c.b_shape
        )?;
    }
    for f in &report.failed {
        writeln!(out, "failed: {}: {}", f.name, f.error)?;
    }
    let mut worst = differing;
    worst.sort_by(|x, y| y.rel_error.total_cmp(&x.rel_error));
    for c in worst.iter().take(20) {
        writeln!(
            out,
            "differs: {}  max |a-b| {:.3e}  relative {:.3e}{}{}",
            c.name,
            c.max_abs_diff,
            c.rel_error,
            if c.nan { "  NaN" } else { "" },
            if c.inf { "  Inf" } else { "" }
        )?;
    }
    Ok(())
}
