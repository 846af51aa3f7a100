//! Recordings and walks in the formats other viewers open: Perfetto (and
//! `chrome://tracing`) read Chrome's Trace Event JSON, speedscope its own
//! file format, flamegraph.pl and inferno folded stacks. The fourth room
//! of the profiler, after the analyses: it reads traces and what the
//! analyses make of them, and writes text; the CLI (`weightscope export`)
//! puts that text into a file through `files::Output`.
//!
//! Several traces are the journals of one job's ranks or hosts: they are
//! merged onto one clock as `report` merges them, one lane each.

mod folded;
mod perfetto;
mod speedscope;

use crate::memory::Sample;
use crate::profile::Trace;
use crate::profile::analysis::hosts;
use crate::profile::analysis::recording::Recording;
use crate::profile::analysis::stacks::StackGrowth;
use crate::profile::trace::TraceEvent;
use crate::profile::trace::census::Census;
use crate::profile::trace::stacks::{Frame, TraceStacks};

pub use folded::write_folded;
pub use perfetto::write_perfetto;
pub use speedscope::write_speedscope;

/// Which viewer's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Chrome's Trace Event JSON (Perfetto, `chrome://tracing`).
    Perfetto,
    /// speedscope's file format (a memory flame graph).
    Speedscope,
    /// Folded stacks, one line a stack (flamegraph.pl, inferno).
    Folded,
}

impl Format {
    /// Its name, as `--format` takes it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Perfetto => "perfetto",
            Self::Speedscope => "speedscope",
            Self::Folded => "folded",
        }
    }
}

/// What a stack's weight is in a flame graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weight {
    /// What the memory that grew while the stack worked still held at the
    /// job's peak: what the peak is made of.
    #[default]
    HeldAtPeak,
    /// All that grew while the stack worked, freed later or not.
    Grew,
}

/// One trace to export, on the export's clock.
pub struct Lane {
    /// Its name in the viewer: the trace's label, or its rank and host.
    pub name: String,
    /// Where its second 0 is on the export's clock (0 for one trace).
    pub offset_secs: f64,
    /// What it is.
    pub kind: LaneKind,
}

/// A lane's trace: a recorded job or a walk.
pub enum LaneKind {
    /// `record`'s trace (or journal), with what the replay made of it.
    Recording(Box<Recording>),
    /// A walk's trace (the window's or `walk --trace`'s).
    Walk(Box<Trace>),
}

impl Lane {
    /// The memory samples.
    #[must_use]
    pub fn samples(&self) -> &[Sample] {
        match &self.kind {
            LaneKind::Recording(r) => &r.samples,
            LaneKind::Walk(t) => &t.samples,
        }
    }

    /// The events.
    #[must_use]
    pub fn events(&self) -> &[TraceEvent] {
        match &self.kind {
            LaneKind::Recording(r) => &r.events,
            LaneKind::Walk(t) => &t.events,
        }
    }

    /// The probe's stacks, for a recording made with the probe.
    #[must_use]
    pub fn stacks(&self) -> Option<&TraceStacks> {
        match &self.kind {
            LaneKind::Recording(r) => r.stacks.as_ref(),
            LaneKind::Walk(_) => None,
        }
    }

    /// The probe's held-by walks, in time order.
    #[must_use]
    pub fn censuses(&self) -> &[Census] {
        self.stacks().map_or(&[], |s| s.held.as_slice())
    }

    /// Whether its journal ended without its last line (the recorder was
    /// killed): what it holds is exported, and said to be cut short.
    #[must_use]
    pub fn cut_short(&self) -> bool {
        match &self.kind {
            LaneKind::Recording(r) => r.cut_short,
            LaneKind::Walk(t) => t.cut_short,
        }
    }

    /// The highest memory sampled and when: MLX active where the trace has
    /// MLX's figures, else RSS. `None` without samples.
    #[must_use]
    pub fn peak(&self) -> Option<(f64, u64, &'static str)> {
        let samples = self.samples();
        let mlx = samples.iter().any(|s| s.mlx.is_some());
        samples
            .iter()
            .map(|s| {
                let bytes = if mlx {
                    s.mlx.map_or(0, |m| m.active_bytes)
                } else {
                    s.process.rss_bytes
                };
                (s.at, bytes)
            })
            .max_by_key(|&(_, bytes)| bytes)
            .map(|(at, bytes)| (at, bytes, if mlx { "MLX active" } else { "RSS" }))
    }

    /// The flame graph's stacks, outermost frame first, with their weight
    /// in bytes: a recording's Python stacks by `weight`; a walk's
    /// materializations as policy, shard, tensor. Stacks of no weight are
    /// left out.
    #[must_use]
    pub fn weighted_stacks(&self, weight: Weight) -> Vec<(Vec<FrameName>, u64)> {
        match &self.kind {
            LaneKind::Recording(r) => {
                let Some(stacks) = &r.stacks else {
                    return Vec::new();
                };
                r.by_stack
                    .iter()
                    .filter_map(|g| {
                        let bytes = weight_of(g, weight);
                        let frames = stacks.stacks.get(g.stack as usize)?;
                        let names: Vec<FrameName> = frames
                            .iter()
                            .rev()
                            .filter_map(|&f| stacks.frames.get(f as usize))
                            .map(FrameName::of)
                            .collect();
                        (bytes > 0 && !names.is_empty()).then_some((names, bytes))
                    })
                    .collect()
            }
            LaneKind::Walk(t) => {
                let root = t
                    .policy
                    .map_or_else(|| t.label.clone(), |p| p.as_str().to_owned());
                t.events
                    .iter()
                    .filter(|e| {
                        matches!(
                            e.kind,
                            crate::memory::MarkKind::Materialize
                                | crate::memory::MarkKind::WalkStep
                        ) && e.bytes > 0
                    })
                    .map(|e| {
                        let shard = e.shard.clone().unwrap_or_else(|| "?".to_owned());
                        let names = vec![
                            FrameName::plain(root.clone()),
                            FrameName::plain(shard),
                            FrameName::plain(e.target.clone()),
                        ];
                        (names, e.bytes)
                    })
                    .collect()
            }
        }
    }

    /// Whether [`Lane::weighted_stacks`] can have anything: a walk, or a
    /// recording made with the probe's stacks.
    #[must_use]
    pub fn has_stacks(&self) -> bool {
        match &self.kind {
            LaneKind::Recording(r) => r.stacks.as_ref().is_some_and(|s| !s.stacks.is_empty()),
            LaneKind::Walk(_) => true,
        }
    }
}

fn weight_of(growth: &StackGrowth, weight: Weight) -> u64 {
    match weight {
        Weight::HeldAtPeak => growth.held_at_peak_bytes,
        Weight::Grew => growth.grew_bytes,
    }
}

/// A flame graph frame: its name, and where it is when it is a line of
/// Python.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameName {
    /// `function` for Python, the policy, shard or tensor for a walk.
    pub name: String,
    /// The source file, for Python.
    pub file: Option<String>,
    /// The line, for Python.
    pub line: Option<u32>,
}

impl FrameName {
    fn of(frame: &Frame) -> Self {
        Self {
            name: frame.function.clone(),
            file: Some(frame.file.clone()),
            line: Some(frame.line),
        }
    }

    fn plain(name: String) -> Self {
        Self {
            name,
            file: None,
            line: None,
        }
    }

    /// `function (file.py:12)`, or the plain name.
    #[must_use]
    pub fn label(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => {
                let short = file.rsplit(['/', '\\']).next().unwrap_or(file);
                format!("{} ({short}:{line})", self.name)
            }
            _ => self.name.clone(),
        }
    }
}

/// An export made: the file's bytes, and how many stacks its flame graph
/// weighs (0: an empty flame graph; always 0 for Perfetto).
pub struct Exported {
    /// What the file holds.
    pub bytes: Vec<u8>,
    /// The stacks written (speedscope, folded).
    pub stacks: usize,
}

/// `traces` (each named by its path as shown) in `format`, weighing a flame
/// graph's stacks by `weight`: what `weightscope export` writes and what
/// the window's export writes, byte for byte.
///
/// # Errors
/// [`lanes`]' and the writers' errors.
pub fn export(
    traces: Vec<(String, Trace)>,
    format: Format,
    weight: Weight,
) -> Result<Exported, ExportError> {
    // The file's name in the viewer: the first trace's label, as the
    // window names it, else its path.
    let name = traces
        .first()
        .map(|(path, trace)| {
            if trace.label.is_empty() {
                path.clone()
            } else {
                trace.label.clone()
            }
        })
        .unwrap_or_default();
    let lanes = lanes(traces)?;
    let mut bytes = Vec::new();
    let stacks = match format {
        Format::Perfetto => {
            write_perfetto(&lanes, &mut bytes)?;
            0
        }
        Format::Speedscope => write_speedscope(&lanes, weight, &name, &mut bytes)?,
        Format::Folded => write_folded(&lanes, weight, &mut bytes)?,
    };
    // What a viewer or a terminal shows: every character that is not shown
    // as itself escaped (JSON's `\u` escapes, which the viewers decode;
    // folded stacks line by line as `units::Shown`).
    let bytes = match format {
        Format::Perfetto | Format::Speedscope => {
            let mut shown = crate::units::ShownJson::new(Vec::with_capacity(bytes.len()));
            std::io::Write::write_all(&mut shown, &bytes)
                .and_then(|()| shown.finish())
                .unwrap_or(bytes)
        }
        Format::Folded => {
            let mut shown = crate::units::ShownLines::new(Vec::with_capacity(bytes.len()));
            std::io::Write::write_all(&mut shown, &bytes)
                .and_then(|()| shown.finish())
                .unwrap_or(bytes)
        }
    };
    Ok(Exported { bytes, stacks })
}

/// The lanes of `traces` (name, trace), on one clock: one trace as it is;
/// several, the recordings of one job's ranks or hosts, merged as `report`
/// merges them.
///
/// # Errors
/// [`ExportError::Mixed`] when several traces are not all recordings.
pub fn lanes(traces: Vec<(String, Trace)>) -> Result<Vec<Lane>, ExportError> {
    if traces.len() == 1 {
        let Some((name, trace)) = traces.into_iter().next() else {
            return Ok(Vec::new());
        };
        let name = if trace.label.is_empty() {
            name
        } else {
            trace.label.clone()
        };
        let kind = if trace.job.is_some() {
            LaneKind::Recording(Box::new(Recording::from_trace(trace)))
        } else {
            LaneKind::Walk(Box::new(trace))
        };
        return Ok(vec![Lane {
            name,
            offset_secs: 0.0,
            kind,
        }]);
    }
    let mut recordings = Vec::with_capacity(traces.len());
    for (name, trace) in traces {
        if trace.job.is_none() {
            return Err(ExportError::Mixed(name));
        }
        recordings.push((name, Recording::from_trace(trace)));
    }
    let merged = hosts::merge(&recordings);
    let mut lanes: Vec<Lane> = recordings
        .into_iter()
        .zip(merged.lanes)
        .map(|((file, recording), lane)| Lane {
            // A rank says which lane it is; without one, the file does.
            name: if lane.ranks.is_empty() {
                format!("{} ({})", file, lane.host)
            } else {
                format!("{} ({})", lane.ranks_name(), lane.host)
            },
            offset_secs: lane.start_secs,
            kind: LaneKind::Recording(Box::new(recording)),
        })
        .collect();
    // Each lane its own name (a flame graph's root frame, a process name).
    let mut seen = std::collections::HashSet::new();
    for (i, lane) in lanes.iter_mut().enumerate() {
        if !seen.insert(lane.name.clone()) {
            lane.name = format!("{} #{}", lane.name, i + 1);
            seen.insert(lane.name.clone());
        }
    }
    Ok(lanes)
}

/// Why an export cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Several traces, one of them a walk: only recordings merge.
    #[error("{0}: a walk's trace; several traces are merged only when each is a recording")]
    Mixed(String),
    /// A flame graph of a recording made without the probe's stacks.
    #[error(
        "{0}: no Python stacks in this recording (recorded without the probe, or the job never ran Python); --format perfetto has its memory over time"
    )]
    NoStacks(String),
    /// Writing the output failed.
    #[error("cannot write the export: {0}")]
    Write(#[from] std::io::Error),
}

/// Folded-stack and speedscope frame names keep to one line: control
/// characters become spaces (a name comes from the job's own code).
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
