//! `weightscope diff A B`: tensors only in A, only in B, changed (logical
//! shape), and for the rest how far B moved from A (largest absolute
//! difference, relative error, SNR, cosine), both sides decoded to f32 on
//! MLX whatever their dtypes or quantization, one tensor at a time with
//! shards released as the walk leaves them.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::units::Shown;
use crate::units::human_bytes;
use crate::weights::{DiffReport, MlxLoader, ViewChoice, Weights, snr_text};

use super::CliError;
use super::tensor::JsonStats;

/// What `weightscope diff` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DiffArgs {
    /// The reference checkpoint.
    pub a: PathBuf,
    /// The checkpoint to compare with it.
    pub b: PathBuf,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// A's view: auto, identity, a built-in name or a view file.
    #[arg(long = "view-a", value_name = "VIEW", value_parser = super::view, default_value = "auto")]
    pub view_a: ViewChoice,
    /// B's view: auto, identity, a built-in name or a view file.
    #[arg(long = "view-b", value_name = "VIEW", value_parser = super::view, default_value = "auto")]
    pub view_b: ViewChoice,
    /// Open one tensor instead of diffing them all: A's, B's and the
    /// error's statistics, and for a quantized side its error group by
    /// group (the median, p99 and worst groups).
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
}

/// Opens one side with its view; a bad shard anywhere is refused (as
/// `inspect` refuses it), so a diff never silently skips tensors.
///
/// # Errors
/// One line naming the file and the problem.
fn open_side(path: &std::path::Path, choice: &ViewChoice) -> Result<Weights, CliError> {
    let checkpoint = super::open_checkpoint(path)?;
    if let Some(&problem) = checkpoint.fatal_problems().first() {
        return Err(problem.clone().into());
    }
    let mut weights = Weights::open_with(checkpoint, MlxLoader)?;
    weights.install_choice(choice)?;
    Ok(weights)
}

/// Runs the diff, with a progress line on stderr when it is a terminal;
/// `cancel` stops it between tensors (the report says it was cancelled).
///
/// # Errors
/// A side that cannot be opened, or whose view cannot be installed (one line).
pub fn run(args: &DiffArgs, cancel: &AtomicBool) -> Result<DiffReport, CliError> {
    let mut a = open_side(&args.a, &args.view_a)?;
    let mut b = open_side(&args.b, &args.view_b)?;
    let terminal = std::io::stderr().is_terminal();
    let mut last = Instant::now();
    let report = crate::weights::diff(&mut a, &mut b, cancel, &mut |p| {
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

/// The JSON report (`only_in_a`, `only_in_b`, `changed`, `common`,
/// `by_kind`, `typical_by_mode`, …).
#[must_use]
pub fn to_json<'a>(args: &DiffArgs, report: &'a DiffReport) -> JsonDiff<'a> {
    JsonDiff {
        report,
        a: crate::units::location_data(&args.a.to_string_lossy()),
        b: crate::units::location_data(&args.b.to_string_lossy()),
        by_kind: report.by_kind(),
        typical_by_mode: report
            .typical_by_mode()
            .into_iter()
            .map(|(b_dtype, tensors, median_rel_error)| JsonMode {
                b_dtype,
                tensors,
                median_rel_error,
            })
            .collect(),
    }
}

/// `diff --json`: the report's own keys, the two sides (credentials
/// masked), and the summaries by kind and by B's storage mode.
#[derive(serde::Serialize)]
pub struct JsonDiff<'a> {
    #[serde(flatten)]
    report: &'a DiffReport,
    a: String,
    b: String,
    by_kind: Vec<crate::weights::KindSummary>,
    typical_by_mode: Vec<JsonMode>,
}

/// One of B's storage modes and its typical error.
#[derive(serde::Serialize)]
struct JsonMode {
    b_dtype: String,
    tensors: usize,
    median_rel_error: f64,
}

/// One tensor opened (`--tensor`): its figures on both sides, the error's,
/// and the error per quantization group.
///
/// # Errors
/// A side that cannot be opened or read, or shapes that differ (one line).
pub fn run_tensor(args: &DiffArgs, name: &str) -> Result<crate::weights::PairDetail, CliError> {
    let mut a = open_side(&args.a, &args.view_a)?;
    let mut b = open_side(&args.b, &args.view_b)?;
    Ok(crate::weights::diff_detail(&mut a, &mut b, name, 64)?)
}

/// The opened tensor as JSON: `a`, `b` and `error` statistics, and
/// `groups` (with `worst`) when a side is quantized.
#[must_use]
pub fn tensor_json(d: &crate::weights::PairDetail) -> JsonPair<'_> {
    let stats = JsonStats::from;
    JsonPair {
        name: &d.name,
        a_dtype: &d.a_dtype,
        b_dtype: &d.b_dtype,
        a: stats(&d.a.stats),
        b: stats(&d.b.stats),
        error: stats(&d.error.stats),
        groups: d.groups.as_ref().map(|g| JsonGroups {
            side: g.side,
            group_size: g.group_size,
            groups: g.groups,
            median_rel_error: g.median,
            p99_rel_error: g.p99,
            max_rel_error: g.max,
            worst: g
                .worst
                .iter()
                .map(|w| JsonWorst {
                    row: w.row,
                    group: w.group,
                    rel_error: w.rel_error,
                    max_abs: w.max_abs,
                })
                .collect(),
        }),
    }
}

/// `diff A B --tensor NAME --json`: each side's statistics and the error's.
#[derive(serde::Serialize)]
pub struct JsonPair<'a> {
    name: &'a str,
    a_dtype: &'a str,
    b_dtype: &'a str,
    a: JsonStats,
    b: JsonStats,
    error: JsonStats,
    groups: Option<JsonGroups<'a>>,
}

/// The error per quantization group.
#[derive(serde::Serialize)]
struct JsonGroups<'a> {
    side: &'a str,
    group_size: i32,
    groups: u64,
    median_rel_error: f64,
    p99_rel_error: f64,
    max_rel_error: f64,
    worst: Vec<JsonWorst>,
}

/// One of the worst groups.
#[derive(serde::Serialize)]
struct JsonWorst {
    row: i64,
    group: i64,
    rel_error: f64,
    max_abs: f64,
}

/// The opened tensor as text.
///
/// # Errors
/// When `out` fails.
pub fn write_tensor_text(
    d: &crate::weights::PairDetail,
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(out, "{}", Shown::new(&d.name))?;
    writeln!(out, "A: {}    B: {}", d.a_dtype, d.b_dtype)?;
    writeln!(out, "{:>6} {:>13} {:>13} {:>13}", "", "A", "B", "|a - b|")?;
    let sides = [&d.a.stats, &d.b.stats, &d.error.stats];
    for (label, value) in [
        ("min", sides.map(|s| s.min)),
        ("max", sides.map(|s| s.max)),
        ("mean", sides.map(|s| s.mean)),
        ("std", sides.map(|s| s.std)),
    ] {
        writeln!(
            out,
            "{label:>6} {:>13.5e} {:>13.5e} {:>13.5e}",
            value[0], value[1], value[2]
        )?;
    }
    writeln!(
        out,
        "{:>6} {:>13} {:>13} {:>13}",
        "NaN", sides[0].nan, sides[1].nan, sides[2].nan
    )?;
    writeln!(
        out,
        "{:>6} {:>13} {:>13} {:>13}",
        "Inf", sides[0].inf, sides[1].inf, sides[2].inf
    )?;
    match &d.groups {
        None => writeln!(
            out,
            "no side is quantized along its rows: no per-group error"
        )?,
        Some(g) => {
            writeln!(
                out,
                "per group ({}'s groups of {} along each row): {} groups; relative error median {:.3e}, p99 {:.3e}, worst {:.3e}",
                g.side, g.group_size, g.groups, g.median, g.p99, g.max
            )?;
            writeln!(out, "worst groups: row, columns, relative error, max |a-b|")?;
            let size = i64::from(g.group_size);
            for w in &g.worst {
                writeln!(
                    out,
                    "  {:>8}  {:>7}..{:<7}  {:.3e}  {:.3e}",
                    w.row,
                    w.group * size,
                    (w.group + 1) * size,
                    w.rel_error,
                    w.max_abs
                )?;
            }
        }
    }
    Ok(())
}

/// Rows of each list the text report prints.
const TEXT_ROWS: usize = 20;

/// "… N more WHAT not shown" when a list of `total` rows was cut to
/// [`TEXT_ROWS`].
fn left_out(out: &mut dyn Write, what: &str, total: usize) -> std::io::Result<()> {
    if total > TEXT_ROWS {
        writeln!(
            out,
            "  … {} more {what} not shown (--json lists all)",
            total - TEXT_ROWS
        )?;
    }
    Ok(())
}

/// The names only one side has, and the tied names one side keeps once,
/// [`TEXT_ROWS`] of each at most.
fn write_names(report: &DiffReport, out: &mut impl Write) -> std::io::Result<()> {
    for name in report.only_in_a.iter().take(TEXT_ROWS) {
        writeln!(out, "only in A: {}", Shown::new(name))?;
    }
    left_out(out, "only in A", report.only_in_a.len())?;
    for name in report.only_in_b.iter().take(TEXT_ROWS) {
        writeln!(out, "only in B: {}", Shown::new(name))?;
    }
    left_out(out, "only in B", report.only_in_b.len())?;
    for (name, first) in report.tied.iter().take(TEXT_ROWS) {
        writeln!(
            out,
            "tied: {} is {} under a second name (compared as it)",
            Shown::new(name),
            Shown::new(first)
        )?;
    }
    Ok(())
}

/// The text report: counts, the overall figure, then the tensors that differ
/// most, saying how many rows each list left out.
///
/// # Errors
/// When `out` fails.
pub fn write_text(
    args: &DiffArgs,
    report: &DiffReport,
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(out, "A: {}", Shown::new(&args.a.display().to_string()))?;
    writeln!(out, "B: {}", Shown::new(&args.b.display().to_string()))?;
    let differing = report.differing().count();
    writeln!(
        out,
        "{} compared ({} differ), {} only in A, {} only in B, {} changed shape, {} failed",
        report.common.len(),
        differing,
        report.only_in_a.len(),
        report.only_in_b.len(),
        report.changed.len(),
        report.failed.len()
    )?;
    if let Some(overall) = report.overall_text() {
        writeln!(out, "overall: {}", Shown::new(&overall))?;
    }
    writeln!(
        out,
        "peak MLX active {} {} the bound {} (largest shard of A + of B {}, plus one band's decoding temporaries on each side); {:.2} s{}",
        human_bytes(report.peak_mlx_active_bytes),
        if report.peak_mlx_active_bytes <= report.bound_bytes {
            "within"
        } else {
            "over"
        },
        human_bytes(report.bound_bytes),
        human_bytes(report.two_shards_bytes),
        report.elapsed_secs,
        if report.cancelled { ", cancelled" } else { "" }
    )?;
    write_names(report, out)?;
    for c in report.changed.iter().take(TEXT_ROWS) {
        writeln!(
            out,
            "changed: {} {} {:?} -> {} {:?}",
            Shown::new(&c.name),
            c.a_dtype,
            c.a_shape,
            c.b_dtype,
            c.b_shape
        )?;
    }
    left_out(out, "changed", report.changed.len())?;
    for f in report.failed.iter().take(TEXT_ROWS) {
        writeln!(
            out,
            "failed: {}: {}",
            Shown::new(&f.name),
            Shown::new(&f.error)
        )?;
    }
    left_out(out, "failed", report.failed.len())?;
    write_kinds(report, out)?;
    let worst: Vec<_> = report
        .by_error()
        .into_iter()
        .filter(|c| c.max_abs_diff != 0.0 || c.nan || c.inf)
        .collect();
    if !worst.is_empty() {
        writeln!(out, "worst by relative error (A dtype -> B dtype):")?;
    }
    for c in worst.iter().take(TEXT_ROWS) {
        writeln!(
            out,
            "  {}  rel {:.3e}  SNR {}  cos {:.6}  max |a-b| {:.3e}  {} -> {}{}{}",
            Shown::new(&c.name),
            c.rel_error,
            snr_text(c.snr_db),
            c.cosine,
            c.max_abs_diff,
            c.a_dtype,
            c.b_dtype,
            if c.nan { "  NaN" } else { "" },
            if c.inf { "  Inf" } else { "" }
        )?;
    }
    left_out(out, "differing tensors", worst.len())?;
    Ok(())
}

/// The changed tensors by how B stores them and by module kind.
fn write_kinds(report: &DiffReport, out: &mut impl Write) -> std::io::Result<()> {
    let kinds = report.by_kind();
    if !kinds.is_empty() {
        let modes: Vec<String> = report
            .typical_by_mode()
            .iter()
            .map(|(mode, n, median)| format!("{mode}: {median:.3e} over {n}"))
            .collect();
        writeln!(
            out,
            "typical error by how B stores them (median): {}",
            modes.join("; ")
        )?;
        writeln!(out, "by module kind (median, worst; worst median first):")?;
        for k in kinds.iter().take(TEXT_ROWS) {
            writeln!(
                out,
                "  {:<24} {:<28} {:>5} tensors  median {:.3e}  worst {:.3e}",
                Shown::new(&k.kind),
                k.b_dtype,
                k.tensors,
                k.median_rel_error,
                k.worst_rel_error
            )?;
        }
        if kinds.len() > TEXT_ROWS {
            writeln!(
                out,
                "  … {} more module kinds not shown (--json lists all)",
                kinds.len() - TEXT_ROWS
            )?;
        }
    }
    Ok(())
}

/// `weightscope diff`: runs it and returns the exit status.
#[must_use]
pub fn main(args: &DiffArgs) -> u8 {
    // SIGINT, SIGTERM, SIGHUP: the diff stops after the tensor at hand and
    // prints what it compared, marked as cut short.
    if let Err(err) = super::signals::watch(true, |_| {}) {
        super::stderr_line(format_args!("cannot catch termination signals: {err}"));
    }
    if let Some(name) = &args.tensor {
        return tensor_main(args, name);
    }
    let Some(report) = super::ok_or_said(run(args, &super::signals::CUT_SHORT)) else {
        return super::BAD_INPUT;
    };
    let json = args.json.then(|| to_json(args, &report));
    let written = super::print_report(json.as_ref(), |mut out| write_text(args, &report, &mut out));
    if let Some(signal) = super::signals::received() {
        super::stderr_line(format_args!(
            "the diff was cut short by {}; the report above covers the tensors compared before it",
            super::signals::name(signal)
        ));
        return super::signals::exit_status(signal);
    }
    match super::output_status(written) {
        Ok(()) => 0,
        Err(code) => code,
    }
}

/// `weightscope diff A B --tensor NAME`.
fn tensor_main(args: &DiffArgs, name: &str) -> u8 {
    let detail = match run_tensor(args, name) {
        Ok(d) => d,
        Err(err) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = if args.json {
        super::json_line(&mut out, &tensor_json(&detail))
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        write_tensor_text(&detail, &mut shown).and_then(|()| shown.finish().map(drop))
    };
    match super::output_status(written) {
        Ok(()) => 0,
        Err(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::Common;

    fn row(i: usize) -> Common {
        Common {
            name: format!("model.layers.{i}.mlp.up_proj.weight"),
            layer: Some(i as u64),
            a_dtype: "BF16".into(),
            b_dtype: "U32 affine 4-bit g64".into(),
            max_abs_diff: 0.01,
            rel_error: 0.1 + i as f64 * 1e-3,
            snr_db: 20.0,
            cosine: 0.99,
            nan: false,
            inf: false,
            params: 4096,
            diff_sq: 1.0,
            a_sq: 100.0,
        }
    }

    #[test]
    fn the_text_says_how_many_rows_it_left_out_and_lists_the_worst_first() {
        let report = DiffReport {
            only_in_b: (0..23).map(|i| format!("extra.{i}")).collect(),
            common: (0..25).map(row).collect(),
            compared: 25,
            total: 25,
            peak_mlx_active_bytes: 1,
            two_shards_bytes: 2,
            bound_bytes: 3,
            elapsed_secs: 0.5,
            overall_rel_error: 0.1,
            overall_snr_db: 20.0,
            overall_tensors: 1,
            ..DiffReport::default()
        };
        let args = DiffArgs {
            a: "a".into(),
            b: "b".into(),
            view_a: ViewChoice::Auto,
            view_b: ViewChoice::Auto,
            json: false,
            tensor: None,
        };
        let mut out = Vec::new();
        write_text(&args, &report, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("… 3 more only in B not shown"), "{text}");
        assert!(
            text.contains("… 5 more differing tensors not shown"),
            "{text}"
        );
        let first = text
            .lines()
            .find(|l| l.starts_with("  model."))
            .expect("a row");
        assert!(first.contains("model.layers.24."), "worst first: {first}");
        assert!(text.contains("within the bound"), "{text}");
    }
}
