//! `weightscope report TRACE [--json]`: the summary of a saved recording
//! (`record --trace`, a journal included, cut short or not), with the same
//! figures `record` printed: the replay of its samples, stacks and events.

use std::io::Write as _;
use std::path::PathBuf;

use crate::profile::Trace;
use crate::profile::analysis::recording::Recording;

/// What `weightscope report` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ReportArgs {
    /// A trace written by `record --trace` (JSON, CSV, or a `.jsonl` journal);
    /// several: the recordings of one distributed job's hosts, merged.
    #[arg(required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// The summary as JSON (the keys of `record --json`) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Several journals: the rank whose findings, lines and held-by are
    /// told after the merged view (default: the rank whose memory peaked
    /// highest).
    #[arg(long, value_name = "RANK")]
    pub rank: Option<u32>,
}

/// `report --json` of several journals: the merged view's keys, and the
/// rank told whole.
#[derive(serde::Serialize)]
struct MergedReport<'a> {
    #[serde(flatten)]
    merged: &'a crate::profile::analysis::hosts::Merged,
    /// The lane (index into `lanes`) told whole.
    shown_lane: usize,
    /// Its summary, with the keys of `record --json`.
    shown: super::record::JsonRecording<'a>,
}

/// Reads the recording in `args.trace`.
///
/// # Errors
/// A line naming the file: unreadable, not a trace, or a walk's trace.
pub fn load(path: &std::path::Path) -> Result<Recording, ReportError> {
    let trace = Trace::load(path)?;
    if trace.job.is_none() {
        return Err(ReportError::NotARecording(path.to_path_buf()));
    }
    Ok(Recording::from_trace(trace))
}

/// Why `report` has nothing to say.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file is not a trace (or cannot be read).
    #[error(transparent)]
    Trace(#[from] crate::profile::TraceError),
    /// A walk's trace: no job was recorded in it.
    #[error("{}: a walk's trace, not a recording (open it in the window to see it)", crate::units::Shown::path(.0))]
    NotARecording(std::path::PathBuf),
}

/// Prints the summary; exit 0, or 2 when the file is not a recording.
#[must_use]
pub fn main(args: &ReportArgs) -> u8 {
    if args.traces.len() > 1 {
        return merged(args);
    }
    let mut recordings = Vec::new();
    for path in &args.traces {
        match load(path) {
            Ok(r) => recordings.push((path.display().to_string(), r)),
            Err(err) => {
                super::stderr_line(format_args!("{err}"));
                return super::BAD_INPUT;
            }
        }
    }
    if args.rank.is_some() {
        super::stderr_line(format_args!(
            "--rank picks one of several journals; one recording is told whole already"
        ));
    }
    let mut out = std::io::stdout().lock();
    let Some((_, recording)) = recordings.pop() else {
        return super::BAD_INPUT;
    };
    let written = if args.json {
        let text = crate::units::json_shown(
            serde_json::to_string_pretty(&super::record::summary_json(&recording))
                .unwrap_or_default(),
        );
        std::io::Write::write_all(&mut out, (text + "\n").as_bytes())
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        super::record::write_summary(&recording, &mut shown).and_then(|()| shown.finish().map(drop))
    };
    super::output_status(written).map_or_else(|code| code, |()| 0)
}

/// Several journals: the merged view, then the chosen rank's summary.
fn merged(args: &ReportArgs) -> u8 {
    use crate::profile::analysis::journals::{ShownLane, lane_label, merge_journals};
    let shown = args.rank.map_or(ShownLane::Peak, ShownLane::Rank);
    let Some(journals) = super::ok_or_said(merge_journals(&args.traces, shown)) else {
        return super::BAD_INPUT;
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let report = MergedReport {
            merged: &journals.merged,
            shown_lane: journals.shown,
            shown: super::record::JsonRecording::of(&journals.recording),
        };
        let text =
            crate::units::json_shown(serde_json::to_string_pretty(&report).unwrap_or_default());
        std::io::Write::write_all(&mut out, (text + "\n").as_bytes())
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        let lane = journals.merged.lanes.get(journals.shown);
        let why = if args.rank.is_some() {
            "as asked"
        } else {
            "its memory peaked highest; --rank R tells another"
        };
        journals
            .merged
            .describe()
            .iter()
            .try_for_each(|line| writeln!(shown, "{line}"))
            .and_then(|()| {
                writeln!(
                    shown,
                    "\n{} told whole ({why}), on the merged clock:",
                    lane.map(lane_label).unwrap_or_default()
                )
            })
            .and_then(|()| super::record::write_summary(&journals.recording, &mut shown))
            .and_then(|()| shown.finish().map(drop))
    };
    super::output_status(written).map_or_else(|code| code, |()| 0)
}
