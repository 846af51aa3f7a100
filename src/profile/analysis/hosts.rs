//! Recordings of one distributed job taken on several hosts (each host's
//! ranks under its own `weightscope record`), read as one: the hosts'
//! clocks aligned by the job's collectives, each recording's memory as a
//! lane, the job's total, which rank peaked and where, the straggler of
//! each collective, and a rank killed while the others waited.
//!
//! The alignment: a collective's evaluation returns at the same moment on
//! every rank (the last rank's data completes it for all), so for each
//! recording the offset of its wall clock against the first recording's is
//! the median, over the collective steps both saw, of the difference of
//! their `collective-done` times; the residual is the largest disagreement
//! left after it.

use serde::Serialize;

use super::recording::{JobExit, Recording};
use super::stacks;
use crate::memory::MarkKind;
use crate::profile::trace::{TraceError, collective_of};

/// One recording in the merged view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lane {
    /// The file it was read from.
    pub file: String,
    /// The host it was taken on (`?` when the recording does not say).
    pub host: String,
    /// The ranks its collectives (or its environment) named.
    pub ranks: Vec<u32>,
    /// Seconds added to its own wall clock to put it on the first
    /// recording's clock.
    pub offset_secs: f64,
    /// Collective steps the offset was solved from.
    pub steps_matched: usize,
    /// Its second 0 on the merged clock.
    pub start_secs: f64,
    /// Its highest MLX active memory (RSS when it has no MLX figures).
    pub peak_bytes: u64,
    /// Whether `peak_bytes` is MLX active memory (else RSS).
    pub mlx: bool,
    /// When that was, in seconds on the merged clock.
    pub peak_secs: f64,
    /// Where its job was then (`file:line in function`).
    pub peak_where: String,
    /// Where its job was last seen (its last stack sample).
    pub last_where: String,
    /// How its job ended ("exit 0", "signal 9", "cut short").
    pub ended: String,
    /// When, on the merged clock.
    pub end_secs: f64,
    /// Killed by the kernel for memory (a memory cgroup's OOM kill, or
    /// SIGKILL).
    pub killed: bool,
}

/// One collective step where the ranks waited for one of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Straggler {
    /// The step's number (every rank makes the same sequence).
    pub step: u64,
    /// Its collectives (`all_sum`, …).
    pub ops: String,
    /// The rank that came last.
    pub rank: u32,
    /// Its host.
    pub host: String,
    /// When it came, on the merged clock.
    pub at_secs: f64,
    /// How long the first rank there waited for it.
    pub waited_secs: f64,
}

/// A rank that waited in a collective that never returned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stuck {
    /// The rank.
    pub rank: u32,
    /// Its host.
    pub host: String,
    /// The collectives it waited in.
    pub ops: String,
    /// The step it waited at.
    pub step: u64,
    /// Since when, on the merged clock.
    pub from_secs: f64,
    /// Until its recording ended.
    pub until_secs: f64,
    /// How its job ended ("exit 1": MLX's ring backend raises when a peer
    /// is gone; "signal 2": stopped).
    pub ended: String,
}

/// The merged view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Merged {
    /// Each recording, in the order given.
    pub lanes: Vec<Lane>,
    /// The largest disagreement of a collective's return across lanes after
    /// the alignment, in seconds (`None`: nothing to align by).
    pub residual_secs: Option<f64>,
    /// The lane (index) whose peak was highest.
    pub peak_lane: Option<usize>,
    /// The job's total (every lane's MLX active, else RSS, summed on the
    /// merged clock) at its highest, and when.
    pub total_peak_bytes: u64,
    /// When the total was highest.
    pub total_peak_secs: f64,
    /// Steps where the first rank waited for the last, longest wait first
    /// (at most 20).
    pub stragglers: Vec<Straggler>,
    /// Ranks left waiting in a collective that never returned.
    pub stuck: Vec<Stuck>,
    /// The job's ranks in all, as the journals' environments said it
    /// (`MLX_HOSTFILE`, `MLX_WORLD_SIZE`, `MLX_IBV_DEVICES`, MPI's).
    pub world_size: Option<u32>,
}

/// Collective events of a recording: (rank, step, ops, done, local secs).
fn collectives(
    recording: &Recording,
    fallback_rank: Option<u32>,
) -> Vec<(u32, u64, String, bool, f64)> {
    recording
        .events
        .iter()
        .filter(|e| matches!(e.kind, MarkKind::CollectiveWait | MarkKind::CollectiveDone))
        .filter_map(|e| {
            let (rank, step) = collective_of(&e.detail);
            Some((
                rank.or(fallback_rank)?,
                step?,
                e.target.clone(),
                e.kind == MarkKind::CollectiveDone,
                e.t_secs,
            ))
        })
        .collect()
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// A sample's memory: MLX active when the recording has MLX figures (its
/// probe reported them: [`has_mlx_figures`]), else RSS.
#[must_use]
pub fn memory_of(sample: &crate::memory::Sample, mlx: bool) -> u64 {
    if mlx {
        sample.mlx.map_or(0, |m| m.active_bytes)
    } else {
        sample.process.rss_bytes
    }
}

/// Whether any of `samples` has MLX figures (a lane is then counted in MLX
/// active memory, else in RSS).
#[must_use]
pub fn has_mlx_figures(samples: &[crate::memory::Sample]) -> bool {
    samples.iter().any(|s| s.mlx.is_some())
}

fn has_mlx(recording: &Recording) -> bool {
    has_mlx_figures(&recording.samples)
}

/// The job's total (each lane's memory at the same moment, summed) at its
/// highest over every sample time of every lane, and when (merged clock).
/// `merged(i, t)`: lane `i`'s own second `t` on the merged clock. One sweep
/// of every lane's samples in time order (a k-way merge), each lane's last
/// value kept: O(samples x log lanes), memory by the lanes.
fn total_peak(
    recordings: &[(String, Recording)],
    merged: &dyn Fn(usize, f64) -> f64,
) -> (u64, f64) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    /// A merged second, ordered (samples are finite).
    #[derive(PartialEq)]
    struct At(f64);
    impl Eq for At {}
    impl PartialOrd for At {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for At {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&other.0)
        }
    }
    let mlx: Vec<bool> = recordings.iter().map(|(_, r)| has_mlx(r)).collect();
    let mut current = vec![0u64; recordings.len()];
    let mut total: u64 = 0;
    // (when, 0 for a sample or 1 for the lane's end, lane, sample): at one
    // moment the samples count first; after its end a lane holds nothing
    // (its process is gone).
    let mut next: BinaryHeap<Reverse<(At, u8, usize, usize)>> = recordings
        .iter()
        .enumerate()
        .filter_map(|(i, (_, r))| {
            r.samples
                .first()
                .map(|s| Reverse((At(merged(i, s.at)), 0, i, 0)))
        })
        .collect();
    let mut best = (0u64, 0.0);
    while let Some(Reverse((At(t), phase, _, _))) = next.peek() {
        let (t, phase) = (*t, *phase);
        // Every sample (or end) at this moment first, then the total.
        while let Some(Reverse((At(at), p, i, k))) = next.peek() {
            if at.total_cmp(&t).is_ne() || *p != phase {
                break;
            }
            let (lane, sample) = (*i, *k);
            next.pop();
            let r = &recordings[lane].1;
            let value = if phase == 0 {
                memory_of(&r.samples[sample], mlx[lane])
            } else {
                0
            };
            total = total - current[lane] + value;
            current[lane] = value;
            if phase == 1 {
                continue;
            }
            match r.samples.get(sample + 1) {
                Some(s) => next.push(Reverse((At(merged(lane, s.at)), 0, lane, sample + 1))),
                None => next.push(Reverse((At(merged(lane, lane_end(r))), 1, lane, sample))),
            }
        }
        if total > best.0 {
            best = (total, t);
        }
    }
    best
}

/// Collective events of one recording: (rank, step, ops, done, local secs).
type Collectives = Vec<(u32, u64, String, bool, f64)>;

fn wall(r: &Recording) -> f64 {
    r.origin.as_ref().map_or(0.0, |o| o.wall_unix_secs)
}

/// The rank a recording's environment (or its probes) named.
fn own_rank(r: &Recording) -> Option<u32> {
    r.origin
        .as_ref()
        .and_then(|o| o.rank)
        .or_else(|| r.ranks.first().map(|p| p.rank))
}

/// Each recording's offset against the first one's wall clock and the
/// steps it was solved from, and the largest disagreement left.
fn align(
    recordings: &[(String, Recording)],
    events: &[Collectives],
) -> (Vec<(f64, usize)>, Option<f64>) {
    // Each step's return on a recording's own wall clock.
    let done_of = |i: usize| -> std::collections::BTreeMap<u64, f64> {
        events[i]
            .iter()
            .filter(|e| e.3)
            .map(|e| (e.1, wall(&recordings[i].1) + e.4))
            .collect()
    };
    let reference = if recordings.is_empty() {
        std::collections::BTreeMap::new()
    } else {
        done_of(0)
    };
    let mut offsets = Vec::new();
    let mut residual: Option<f64> = None;
    for i in 0..recordings.len() {
        let differences: Vec<f64> = done_of(i)
            .iter()
            .filter_map(|(step, t)| Some(reference.get(step)? - t))
            .collect();
        let offset = median(differences.clone()).unwrap_or(0.0);
        for d in &differences {
            let off = (d - offset).abs();
            residual = Some(residual.map_or(off, |r: f64| r.max(off)));
        }
        offsets.push((offset, differences.len()));
    }
    (offsets, residual)
}

/// When a recording ended, on its own clock: its last sample or the job's
/// end, whichever is later.
fn lane_end(r: &Recording) -> f64 {
    r.samples
        .last()
        .map_or(r.elapsed_secs, |s| s.at.max(r.elapsed_secs))
}

/// One recording's lane; `merged(t)` puts its own second `t` on the
/// merged clock.
fn lane(
    file: &str,
    r: &Recording,
    events: &Collectives,
    offset: (f64, usize),
    merged: &dyn Fn(f64) -> f64,
) -> Lane {
    let mut ranks: Vec<u32> = events.iter().map(|e| e.0).collect();
    ranks.extend(own_rank(r));
    ranks.sort_unstable();
    ranks.dedup();
    let mlx = has_mlx(r);
    let (peak_bytes, peak_local) = r
        .samples
        .iter()
        .map(|s| (memory_of(s, mlx), s.at))
        .max_by_key(|p| p.0)
        .unwrap_or((0, 0.0));
    let ended = r.ended();
    let end_local = lane_end(r);
    Lane {
        file: file.to_owned(),
        host: r
            .origin
            .as_ref()
            .map_or_else(|| "?".to_owned(), |o| o.host.clone()),
        ranks,
        offset_secs: offset.0,
        steps_matched: offset.1,
        start_secs: merged(0.0),
        peak_bytes,
        mlx,
        peak_secs: merged(peak_local),
        peak_where: stacks::describe(&r.peak_stack),
        last_where: stacks::describe(&r.last_stack),
        ended,
        end_secs: merged(end_local),
        killed: r.memory_kill.is_some() || matches!(r.exit, Some(JobExit::Signal(9))),
    }
}

/// At each step, the rank that began waiting last (longest waits first,
/// at most 20), and the waits that never returned.
fn waits(
    events: &[Collectives],
    lanes: &[Lane],
    merged: &dyn Fn(usize, f64) -> f64,
) -> (Vec<Straggler>, Vec<Stuck>) {
    let mut waits: std::collections::BTreeMap<u64, Vec<(f64, u32, usize, String)>> =
        std::collections::BTreeMap::new();
    let mut stuck = Vec::new();
    for (i, lane_events) in events.iter().enumerate() {
        // The collectives that returned, by rank and step: one look each.
        let returned: std::collections::HashSet<(u32, u64)> = lane_events
            .iter()
            .filter(|e| e.3)
            .map(|e| (e.0, e.1))
            .collect();
        for (rank, step, ops, done, local) in lane_events {
            if *done {
                continue;
            }
            waits
                .entry(*step)
                .or_default()
                .push((merged(i, *local), *rank, i, ops.clone()));
            if !returned.contains(&(*rank, *step)) {
                stuck.push(Stuck {
                    rank: *rank,
                    host: lanes[i].host.clone(),
                    ops: ops.clone(),
                    step: *step,
                    from_secs: merged(i, *local),
                    until_secs: lanes[i].end_secs,
                    ended: lanes[i].ended.clone(),
                });
            }
        }
    }
    let mut stragglers: Vec<Straggler> = waits
        .into_iter()
        .filter(|(_, w)| w.len() > 1)
        .filter_map(|(step, w)| {
            let first = w.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
            let last = w.iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
            Some(Straggler {
                step,
                ops: last.3.clone(),
                rank: last.1,
                host: lanes[last.2].host.clone(),
                at_secs: last.0,
                waited_secs: last.0 - first,
            })
        })
        .collect();
    stragglers.sort_by(|a, b| b.waited_secs.total_cmp(&a.waited_secs));
    stragglers.truncate(20);
    (stragglers, stuck)
}

/// Why journals could not be merged: one line, naming the file or the
/// pattern (already made safe to show).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A journal that could not be read.
    #[error("{file}: {why}")]
    Unreadable {
        /// The file, as shown.
        file: String,
        /// The trace reader's reason.
        why: TraceError,
    },
    /// A trace that is not a recording of a job (a walk's, say).
    #[error("{file}: not a recording (only the journals of one job's ranks merge)")]
    NotRecording {
        /// The file, as shown.
        file: String,
    },
    /// No journal at all.
    #[error("no journal to merge")]
    Nothing,
    /// A rank (or place) that none of the journals is.
    #[error("{asked}: no journal recorded it (they recorded {ranks})")]
    NoSuchLane {
        /// What was asked for ("rank 5").
        asked: String,
        /// The ranks there are, in words.
        ranks: String,
    },
    /// A pattern the glob crate refused.
    #[error("{pattern}: {why}")]
    Pattern {
        /// The pattern, as shown.
        pattern: String,
        /// Why.
        why: String,
    },
    /// A pattern that names no file.
    #[error("{pattern}: no file matches")]
    NoMatch {
        /// The pattern, as shown.
        pattern: String,
    },
    /// A pattern that names too many files.
    #[error("{pattern}: more than {most} files match; name fewer")]
    TooMany {
        /// The pattern, as shown.
        pattern: String,
        /// The most that merge.
        most: usize,
    },
}

/// Merges `recordings` (file name, recording) of one job.
#[must_use]
pub fn merge(recordings: &[(String, Recording)]) -> Merged {
    let events: Vec<Collectives> = recordings
        .iter()
        .map(|(_, r)| collectives(r, own_rank(r)))
        .collect();
    let (offsets, residual) = align(recordings, &events);
    // The merged clock: seconds since the earliest recording's start.
    let start = recordings
        .iter()
        .zip(&offsets)
        .map(|((_, r), (o, _))| wall(r) + o)
        .fold(f64::INFINITY, f64::min);
    let start = if start.is_finite() { start } else { 0.0 };
    let to_merged = |i: usize, local: f64| wall(&recordings[i].1) + offsets[i].0 + local - start;
    let lanes: Vec<Lane> = recordings
        .iter()
        .enumerate()
        .map(|(i, (file, r))| lane(file, r, &events[i], offsets[i], &|t| to_merged(i, t)))
        .collect();
    let peak_lane = lanes
        .iter()
        .enumerate()
        .max_by_key(|(_, l)| l.peak_bytes)
        .map(|(i, _)| i);
    let (total_peak_bytes, total_peak_secs) = total_peak(recordings, &to_merged);
    let (stragglers, stuck) = waits(&events, &lanes, &to_merged);
    let world_size = recordings
        .iter()
        .filter_map(|(_, r)| r.origin.as_ref()?.world_size)
        .max();
    Merged {
        world_size,
        lanes,
        residual_secs: residual,
        peak_lane,
        total_peak_bytes,
        total_peak_secs,
        stragglers,
        stuck,
    }
}

impl Merged {
    /// The view in words, one fact a line.
    #[must_use]
    pub fn describe(&self) -> Vec<String> {
        use crate::units::human_bytes;
        let ranks = Lane::ranks_name;
        let mut out = Vec::new();
        let checked = self.lanes.iter().skip(1).any(|l| l.steps_matched > 1);
        out.push(match self.residual_secs {
            Some(_) if !checked => format!(
                "{} recordings aligned by one collective step (nothing left to check the alignment by)",
                self.lanes.len()
            ),
            Some(r) => format!(
                "{} recordings aligned by their collectives (residual {:.1} ms)",
                self.lanes.len(),
                r * 1e3
            ),
            None => format!(
                "{} recordings on their own wall clocks (no collective in common to align them by)",
                self.lanes.len()
            ),
        });
        for l in &self.lanes {
            out.push(format!(
                "{} ({}): peak {} {} at {:.2} s at {}; {} at {:.2} s; clock {:+.3} s ({} step{})",
                ranks(l),
                l.host,
                if l.mlx { "MLX active" } else { "RSS" },
                human_bytes(l.peak_bytes),
                l.peak_secs,
                l.peak_place(),
                l.ended,
                l.end_secs,
                l.offset_secs,
                l.steps_matched,
                if l.steps_matched == 1 { "" } else { "s" },
            ));
        }
        if let Some(world) = self.world_size {
            let mut seen: Vec<u32> = self.lanes.iter().flat_map(|l| l.ranks.clone()).collect();
            seen.retain(|&r| r < world);
            seen.sort_unstable();
            seen.dedup();
            // (A world size comes from outside: counted, never walked whole.)
            let missing = u64::from(world) - seen.len() as u64;
            let named: Vec<String> = (0..world)
                .filter(|r| seen.binary_search(r).is_err())
                .take(16)
                .map(|r| r.to_string())
                .collect();
            if missing > 0 {
                out.push(format!(
                    "the job had {world} ranks; no journal here recorded {} of them: rank{} {}{}",
                    missing,
                    if missing == 1 { "" } else { "s" },
                    named.join(", "),
                    if missing > 16 { ", …" } else { "" }
                ));
            }
        }
        if let Some(l) = self.peak_lane.and_then(|i| self.lanes.get(i)) {
            out.push(format!(
                "highest: {} ({}) with {} at {:.2} s, at {}",
                ranks(l),
                l.host,
                human_bytes(l.peak_bytes),
                l.peak_secs,
                l.peak_place()
            ));
        }
        out.push(format!(
            "the job in all: {} at {:.2} s",
            human_bytes(self.total_peak_bytes),
            self.total_peak_secs
        ));
        if let Some(s) = self.stragglers.first() {
            out.push(format!(
                "straggler: rank {} ({}) came last to step {} ({}) at {:.2} s; the first rank there waited {:.3} s",
                s.rank, s.host, s.step, s.ops, s.at_secs, s.waited_secs
            ));
        }
        self.killed_lines(&mut out);
        out
    }

    /// A rank killed for memory, and the ranks it left waiting.
    fn killed_lines(&self, out: &mut Vec<String>) {
        use std::fmt::Write as _;
        for killed in self.lanes.iter().filter(|l| l.killed) {
            let waiting: Vec<&Stuck> = self
                .stuck
                .iter()
                .filter(|s| !killed.ranks.contains(&s.rank))
                .collect();
            let mut line = format!(
                "{} ({}) was killed for memory at {:.2} s while at {}",
                killed.ranks_name(),
                killed.host,
                killed.end_secs,
                if killed.last_where.is_empty() {
                    "?"
                } else {
                    &killed.last_where
                }
            );
            if let Some(first) = waiting.first() {
                let who: Vec<String> = waiting.iter().map(|s| s.rank.to_string()).collect();
                let until = waiting.iter().map(|s| s.until_secs).fold(0.0, f64::max);
                let _ = write!(
                    line,
                    "; rank{} {} waited in {} (step {}) from {:.2} s until {} ended at {:.2} s ({})",
                    if who.len() == 1 { "" } else { "s" },
                    who.join(", "),
                    first.ops,
                    first.step,
                    first.from_secs,
                    if who.len() == 1 { "it" } else { "they" },
                    until,
                    first.ended
                );
            }
            out.push(line);
        }
    }
}

impl Lane {
    /// Where its peak was, or `?` when the recording did not say.
    #[must_use]
    pub fn peak_place(&self) -> &str {
        if self.peak_where.is_empty() {
            "?"
        } else {
            &self.peak_where
        }
    }

    /// Its ranks in words: "rank 2", "ranks 0, 1", "rank ?".
    #[must_use]
    pub fn ranks_name(&self) -> String {
        match self.ranks.as_slice() {
            [] => "rank ?".to_owned(),
            [one] => format!("rank {one}"),
            many => format!(
                "ranks {}",
                many.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MlxFigures, Sample};
    use crate::profile::Trace;

    fn recording(samples: Vec<(f64, u64, Option<u64>)>) -> Recording {
        let mut trace = Trace::new("job");
        trace.job = Some(crate::profile::JobInfo::default());
        trace.samples = samples
            .into_iter()
            .map(|(at, rss, active)| Sample {
                at,
                process: crate::memory::ProcessFigures {
                    rss_bytes: rss,
                    ..crate::memory::ProcessFigures::default()
                },
                mlx: active.map(|active_bytes| MlxFigures {
                    active_bytes,
                    ..MlxFigures::default()
                }),
                gpu: None,
            })
            .collect();
        Recording::from_trace(trace)
    }

    /// The total looked up lane by lane at every sample time (what the
    /// sweep replaced): each lane's last sample at or before that moment.
    fn total_peak_by_lookup(recordings: &[(String, Recording)], offsets: &[f64]) -> (u64, f64) {
        let mut best = (0u64, 0.0);
        for (i, (_, r)) in recordings.iter().enumerate() {
            for s in &r.samples {
                let t = s.at + offsets[i];
                let total: u64 = recordings
                    .iter()
                    .enumerate()
                    .map(|(j, (_, other))| {
                        let at = t - offsets[j];
                        if at > lane_end(other) {
                            return 0;
                        }
                        let mlx = has_mlx(other);
                        let k = other.samples.partition_point(|s| s.at <= at);
                        k.checked_sub(1)
                            .and_then(|k| other.samples.get(k))
                            .map_or(0, |s| memory_of(s, mlx))
                    })
                    .sum();
                if total > best.0 {
                    best = (total, t);
                }
            }
        }
        best
    }

    #[test]
    fn the_sweep_finds_the_total_peak_the_lookup_found() {
        // A small generator of its own: the same lanes every run.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for case in 0..40 {
            let lanes = 1 + usize::try_from(next(6)).expect("small");
            let offsets: Vec<f64> = (0..lanes).map(|_| next(8) as f64 * 0.25).collect();
            let recordings: Vec<(String, Recording)> = (0..lanes)
                .map(|i| {
                    let mlx = next(2) == 0;
                    let samples = (0..next(30))
                        .map(|k| {
                            // Times on a coarse grid: lanes share moments.
                            let at = k as f64 * 0.25 + next(2) as f64 * 0.125;
                            (at, next(1000), mlx.then(|| next(1000)))
                        })
                        .collect();
                    (format!("lane {i} of case {case}"), recording(samples))
                })
                .collect();
            let swept = total_peak(&recordings, &|i, t| t + offsets[i]);
            assert_eq!(
                swept,
                total_peak_by_lookup(&recordings, &offsets),
                "case {case}"
            );
        }
    }

    #[test]
    fn ranks_the_job_had_without_a_journal_are_named() {
        let with_origin = |rank: u32, world: u32| {
            let mut r = recording(vec![(0.0, 10, Some(5))]);
            r.origin = Some(crate::profile::trace::Origin {
                host: "h".into(),
                wall_unix_secs: 0.0,
                rank: Some(rank),
                world_size: Some(world),
            });
            (format!("rank{rank}.jsonl"), r)
        };
        let lines = merge(&[with_origin(0, 4), with_origin(2, 4)]).describe();
        assert!(
            lines.contains(
                &"the job had 4 ranks; no journal here recorded 2 of them: ranks 1, 3".to_owned()
            ),
            "{lines:?}"
        );
        let lines = merge(&[with_origin(0, 2), with_origin(1, 2)]).describe();
        assert!(
            !lines.iter().any(|l| l.contains("no journal here")),
            "{lines:?}"
        );
        // A world size from outside is counted, never walked whole.
        let lines = merge(&[with_origin(0, u32::MAX)]).describe();
        let said = lines
            .iter()
            .find(|l| l.contains("no journal here"))
            .expect("said");
        assert!(
            said.ends_with("ranks 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, …"),
            "{said}"
        );
    }

    #[test]
    fn a_rank_that_ended_holds_nothing_after_its_end() {
        // Two ranks one after the other on the wall clock (no collective
        // to align them): the job's total is the larger one, not the sum.
        let at_wall = |wall: f64, rank: u32, bytes: u64| {
            let mut r = recording(vec![(0.0, bytes, None), (1.0, bytes, None)]);
            r.origin = Some(crate::profile::trace::Origin {
                host: "h".into(),
                wall_unix_secs: wall,
                rank: Some(rank),
                world_size: None,
            });
            (format!("rank{rank}.jsonl"), r)
        };
        let merged = merge(&[at_wall(100.0, 0, 64), at_wall(110.0, 1, 96)]);
        assert_eq!(merged.total_peak_bytes, 96);
        // Overlapping, they add up.
        let merged = merge(&[at_wall(100.0, 0, 64), at_wall(100.5, 1, 96)]);
        assert_eq!(merged.total_peak_bytes, 160);
    }
}
