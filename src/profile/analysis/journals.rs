//! The journals of one job's ranks (each host's `weightscope record`) read
//! from their files and merged ([`super::hosts::merge`]), with one rank's
//! recording chosen to be shown whole: its findings, lines and held-by.

use std::path::PathBuf;

use super::hosts::{Lane, MergeError, Merged, merge};
use super::recording::Recording;
use crate::profile::trace::Trace;

/// Which journal of the merged ones is shown whole (its findings, lines,
/// held-by); the others are lanes beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShownLane {
    /// The one whose memory peaked highest ([`Merged::peak_lane`]): the
    /// rank that came closest to running out.
    #[default]
    Peak,
    /// The one at this place among the journals given.
    Index(usize),
    /// The one that recorded this rank.
    Rank(u32),
}

/// The journals merged, on the merged clock (second 0: the start of the
/// one that started first), one of them shown whole.
pub struct MergedJournals {
    /// The journals, in the order given (to merge again, showing another).
    pub paths: Vec<PathBuf>,
    /// The merged view.
    pub merged: Merged,
    /// Which lane of `merged` is shown.
    pub shown: usize,
    /// The shown journal's trace.
    pub trace: Trace,
    /// Its recording.
    pub recording: Recording,
    /// The other journals' traces, moved onto the merged clock.
    pub lanes: Vec<Trace>,
}

/// Reads the journals at `paths` and merges them, `shown` whole.
///
/// # Errors
/// The first journal that cannot be read or is not a recording; no
/// journal; a rank (or place) that none of them is.
pub fn merge_journals(paths: &[PathBuf], shown: ShownLane) -> Result<MergedJournals, MergeError> {
    let mut journals: Vec<(String, Trace)> = Vec::new();
    for path in paths {
        let file = crate::units::Shown::new(&path.display().to_string()).into_string();
        let trace = Trace::load(path).map_err(|why| MergeError::Unreadable {
            file: file.clone(),
            why,
        })?;
        if trace.job.is_none() {
            return Err(MergeError::NotRecording { file });
        }
        let name = path
            .file_name()
            .map_or_else(|| file.clone(), |n| n.to_string_lossy().into_owned());
        journals.push((name, trace));
    }
    let recordings: Vec<(String, Recording)> = journals
        .iter()
        .map(|(name, trace)| (name.clone(), Recording::from_trace(trace.clone())))
        .collect();
    let merged = merge(&recordings);
    let index = shown_index(&merged, shown)?;
    let mut lanes = Vec::new();
    let mut shown_whole = None;
    let mut recordings = recordings.into_iter();
    for (i, ((_, mut journal), lane)) in journals.into_iter().zip(&merged.lanes).enumerate() {
        let recording = recordings.next().map(|(_, r)| r);
        journal.shift_times(lane.start_secs);
        if i == index {
            // Its findings, lines and held-by on the merged clock too: a
            // replay of the moved trace (the one that started first needs
            // none), its checkpoint kept for the findings that use it.
            let recording = match recording {
                Some(r) if lane.start_secs == 0.0 => r,
                _ => Recording::from_trace(journal.clone()),
            };
            shown_whole = Some((lane_trace(journal, lane), recording));
        } else {
            lanes.push(lane_trace(journal, lane));
        }
    }
    let (trace, recording) = shown_whole.ok_or(MergeError::Nothing)?;
    Ok(MergedJournals {
        paths: paths.to_vec(),
        merged,
        shown: index,
        trace,
        recording,
        lanes,
    })
}

/// The lane `shown` names.
fn shown_index(merged: &Merged, shown: ShownLane) -> Result<usize, MergeError> {
    let lanes = merged.lanes.len();
    match shown {
        ShownLane::Peak => Ok(merged.peak_lane.unwrap_or(0).min(lanes.saturating_sub(1))),
        ShownLane::Index(i) if i < lanes => Ok(i),
        ShownLane::Index(i) => Err(MergeError::NoSuchLane {
            asked: format!("journal {}", i + 1),
            ranks: ranks_recorded(merged),
        }),
        ShownLane::Rank(rank) => merged
            .lanes
            .iter()
            .position(|l| l.ranks.contains(&rank))
            .ok_or_else(|| MergeError::NoSuchLane {
                asked: format!("rank {rank}"),
                ranks: ranks_recorded(merged),
            }),
    }
}

/// The ranks the journals recorded, in words ("rank 0, rank 1 (host)").
fn ranks_recorded(merged: &Merged) -> String {
    merged
        .lanes
        .iter()
        .map(|l| format!("{} ({})", l.ranks_name(), l.host))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A journal's trace (its times moved onto the merged clock) as a lane of
/// the merged view: named by its ranks and host.
fn lane_trace(mut trace: Trace, lane: &Lane) -> Trace {
    trace.label = lane_label(lane);
    trace.checkpoint = String::new();
    trace
}

/// A lane's name in the window: its ranks and host.
#[must_use]
pub fn lane_label(lane: &Lane) -> String {
    format!("{} ({})", lane.ranks_name(), lane.host)
}
