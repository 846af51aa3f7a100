//! `weightscope export TRACE... --format perfetto|speedscope|folded [-o OUT]`:
//! a recording, a walk, or the journals of one job's ranks, in the format
//! a colleague's viewer opens (docs/export.md).

use std::path::PathBuf;

use crate::profile::Trace;
use crate::profile::export::{self, ExportError, Format, Weight};
use crate::units::Shown;

/// What `weightscope export` was asked.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[command(
    after_help = "Examples:\n  weightscope export job.jsonl --format perfetto -o job.perfetto.json   (ui.perfetto.dev, chrome://tracing)\n  weightscope export job.json --format speedscope -o job.speedscope.json  (speedscope.app)\n  weightscope export job.json --format folded | flamegraph.pl --countname bytes > job.svg\n  weightscope export rank0.jsonl rank1.jsonl --format perfetto -o job.json   (one track per rank)\nDocs: docs/export.md."
)]
pub struct ExportArgs {
    /// A trace weightscope wrote: `record --trace` (JSON, CSV, or a `.jsonl`
    /// journal, cut short or not), `walk --trace`/`--csv`, or one the window
    /// saved; several: the journals of one job's ranks or hosts, merged onto
    /// one clock as `report` merges them.
    #[arg(required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// The viewer's format: Chrome Trace Event JSON (Perfetto,
    /// `chrome://tracing`), speedscope's, or folded stacks.
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// Write to FILE instead of stdout (never into a checkpoint, never over
    /// a checkpoint file or one of the traces read).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// A flame graph's weight (speedscope, folded): what each stack's growth
    /// still held at the job's peak, or all that grew while it worked.
    #[arg(long, value_enum, default_value_t = WeightArg::HeldAtPeak)]
    pub weight: WeightArg,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Chrome's Trace Event JSON: memory counters, marks, the peak, kills,
    /// held-by walks; one track per rank.
    Perfetto,
    /// speedscope's file format: a memory flame graph, one profile per rank.
    Speedscope,
    /// `frame;frame;frame bytes` lines (flamegraph.pl, inferno).
    Folded,
}

/// `--weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightArg {
    /// What the stack's growth still held at the peak.
    HeldAtPeak,
    /// All that grew while the stack worked.
    Grew,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Perfetto => Self::Perfetto,
            FormatArg::Speedscope => Self::Speedscope,
            FormatArg::Folded => Self::Folded,
        }
    }
}

impl From<WeightArg> for Weight {
    fn from(w: WeightArg) -> Self {
        match w {
            WeightArg::HeldAtPeak => Self::HeldAtPeak,
            WeightArg::Grew => Self::Grew,
        }
    }
}

/// Writes the export; exit 0, 2 for a trace that cannot be read or
/// exported (or an output refused), 1 when writing fails.
#[must_use]
pub fn main(args: &ExportArgs) -> u8 {
    let inputs: Vec<&std::path::Path> = args.traces.iter().map(PathBuf::as_path).collect();
    let output = match args
        .output
        .as_deref()
        .map(|p| crate::files::check_output(p, &inputs))
    {
        Some(Err(err)) => {
            super::stderr_line(format_args!("{err}"));
            return super::BAD_INPUT;
        }
        Some(Ok(output)) => Some(output),
        None => None,
    };
    let mut traces = Vec::with_capacity(args.traces.len());
    for path in &args.traces {
        match Trace::load(path) {
            Ok(trace) => traces.push((Shown::path(path).into_string(), trace)),
            Err(err) => {
                super::stderr_line(format_args!("{err}"));
                return super::BAD_INPUT;
            }
        }
    }
    let made = match export::export(traces, Format::from(args.format), Weight::from(args.weight)) {
        Ok(made) => made,
        Err(err) => {
            super::stderr_line(format_args!("{err}"));
            return match err {
                ExportError::Write(_) => 1,
                _ => super::BAD_INPUT,
            };
        }
    };
    let flame = matches!(args.format, FormatArg::Speedscope | FormatArg::Folded);
    if flame && made.stacks == 0 {
        super::stderr_line(format_args!(
            "no stack weighs anything by --weight {}: the flame graph is empty{}",
            match args.weight {
                WeightArg::HeldAtPeak => "held-at-peak",
                WeightArg::Grew => "grew",
            },
            if args.weight == WeightArg::HeldAtPeak {
                " (--weight grew shows all that grew, freed later or not)"
            } else {
                ""
            }
        ));
    }
    let bytes = made.bytes;
    let written = match &output {
        Some(output) => output
            .write(&bytes)
            .map_err(|err| std::io::Error::other(err.to_string())),
        None => std::io::Write::write_all(&mut std::io::stdout().lock(), &bytes),
    };
    let status = super::output_status(written).map_or_else(|code| code, |()| 0);
    if let (0, Some(path)) = (status, args.output.as_deref()) {
        // Said on stderr once the file is whole, so a script reading
        // stdout gets nothing, and a person knows where it went and what
        // opens it.
        super::stderr_line(format_args!(
            "wrote {} ({}{}): {}",
            Shown::path(path),
            crate::units::human_bytes(bytes.len() as u64),
            if flame {
                format!(", {} stacks", made.stacks)
            } else {
                String::new()
            },
            match args.format {
                FormatArg::Perfetto => "open it at ui.perfetto.dev (Open trace file)",
                FormatArg::Speedscope => "open it at speedscope.app, or `speedscope FILE`",
                FormatArg::Folded => "folded stacks for flamegraph.pl or inferno",
            }
        ));
    }
    status
}
