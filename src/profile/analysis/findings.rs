//! Findings in words: what a trace shows, said the way an engineer would
//! explain it, and whether a walk of this model fits this machine.

use crate::units::human_bytes;

use crate::memory::{ExpectedPeaks, MachineMemory, MarkKind};
use crate::profile::trace::Trace;

/// What a finding is about (tests and the app key on it; JSON names it in
/// kebab case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Tensor releases that did not lower MLX active memory: the map holds them.
    ReleaseFreedNothing,
    /// MLX active fell but RSS did not: MLX's cache or malloc keeps the pages.
    RssDidNotFollow,
    /// The whole model accumulated although a streaming walk would not need it.
    WholeModelAccumulated,
    /// The peak went well past what the headers predict.
    AboveExpected,
    /// The walk was cancelled or stopped by an error.
    Incomplete,
    /// A recorded job kept (nearly) the whole checkpoint at its peak.
    JobAccumulated,
    /// A recorded job held about twice the checkpoint: sources and outputs.
    SourcesAndOutputsKept,
    /// Much of a recorded job's peak was MLX's buffer cache.
    CacheAtPeak,
    /// A recorded job's RSS was far above MLX's memory: host copies.
    HostCopies,
    /// Shard files a job had moved past were still open at its peak.
    FilesHeldOpen,
    /// The recorded job failed or was killed.
    JobFailed,
    /// The recorded job came near the machine's memory.
    NearMachineMemory,
    /// Who held a recorded job's MLX memory at its peak (the probe's walk).
    HeldBy,
    /// The probe's MLX figures stopped coming for a while: a gap in the
    /// series, said rather than concluded from.
    MlxGap,
}

impl FindingKind {
    /// How much it matters: a failed job is an error, the rest warnings.
    #[must_use]
    pub fn severity(self) -> crate::finding::Severity {
        match self {
            Self::JobFailed => crate::finding::Severity::Error,
            _ => crate::finding::Severity::Warning,
        }
    }

    /// The finding of this kind that says `message`, pointing at
    /// `t_secs` on the trace's clock when given.
    #[must_use]
    pub fn said(self, message: String, t_secs: Option<f64>) -> Finding {
        crate::finding::Finding::new(self.severity(), self, message).at(t_secs)
    }
}

/// One finding of a trace: its kind is its code.
pub type Finding = crate::finding::Finding<FindingKind>;

/// Below this, memory moves are noise (allocator rounding, small buffers).
const NOISE_BYTES: u64 = 1 << 20;

/// The findings of `trace`, most important first.
#[must_use]
pub fn findings(trace: &Trace) -> Vec<Finding> {
    let mut found = Vec::new();
    release_freed_nothing(trace, &mut found);
    whole_model_accumulated(trace, &mut found);
    rss_did_not_follow(trace, &mut found);
    above_expected(trace, &mut found);
    incomplete(trace, &mut found);
    found
}

fn release_freed_nothing(trace: &Trace, found: &mut Vec<Finding>) {
    let mut freed_nothing = Vec::new();
    let mut releases = 0;
    for pair in trace.events.windows(2) {
        let (before, event) = (&pair[0], &pair[1]);
        if event.kind != MarkKind::Release || event.bytes < NOISE_BYTES {
            continue;
        }
        releases += 1;
        // Freed means active fell by at least half the tensor's bytes.
        let fell = before
            .mlx_active_bytes
            .saturating_sub(event.mlx_active_bytes);
        if fell < event.bytes / 2 {
            freed_nothing.push(event);
        }
    }
    if let Some(first) = freed_nothing.first() {
        let held: u64 = freed_nothing.iter().map(|e| e.bytes).sum();
        found.push(FindingKind::ReleaseFreedNothing.said(
            format!(
                "releasing `{}` did not lower MLX active memory: the shard map still holds it \
                 ({} of the {releases} releases of tensors of 1 MiB or more freed nothing, {} \
                 held). Release whole shards as the walk leaves them.",
                first.target,
                freed_nothing.len(),
                human_bytes(held)
            ),
            Some(first.t_secs),
        ));
    }
}

fn whole_model_accumulated(trace: &Trace, found: &mut Vec<Finding>) {
    let (Some(expected), Some(policy)) = (trace.expected, trace.policy) else {
        return;
    };
    if policy == crate::memory::Policy::ReleaseShard {
        return;
    }
    let peak = trace.peak_mlx_active_bytes();
    let whole = expected.release_tensor.min(expected.retain);
    if whole > 0 && peak * 10 >= whole * 9 && expected.release_shard * 2 < peak {
        let at = trace
            .events
            .iter()
            .max_by_key(|e| e.mlx_active_bytes)
            .map(|e| e.t_secs);
        found.push(FindingKind::WholeModelAccumulated.said(
            format!(
                "the whole model accumulated: MLX active peaked at {} ({} expected for {policy}); \
                 releasing each shard as the walk leaves it needs about {}",
                human_bytes(peak),
                human_bytes(whole),
                human_bytes(expected.release_shard)
            ),
            at,
        ));
    }
}

/// RSS that neither fell nor was reused after a release: MLX active fell
/// by a shard, yet RSS did not fall by half of it before the next release
/// (events and samples in between, so a fall a moment later counts) and
/// grew, with the next shard, by half of it more than the next shard needs
/// beyond the freed pages (they were not reused either: they sit in MLX's
/// cache or in malloc). A release
/// whose pages MLX's cache reuses for the next shard keeps RSS flat, which
/// is healthy and not said.
fn rss_did_not_follow(trace: &Trace, found: &mut Vec<Finding>) {
    let releases: Vec<usize> = trace
        .events
        .iter()
        .enumerate()
        .filter(|(i, e)| *i > 0 && matches!(e.kind, MarkKind::ReleaseShard | MarkKind::ReleaseAll))
        .map(|(i, _)| i)
        .collect();
    let mut stuck = Vec::new();
    for (j, &i) in releases.iter().enumerate() {
        let (before, event) = (&trace.events[i - 1], &trace.events[i]);
        let active_fell = before
            .mlx_active_bytes
            .saturating_sub(event.mlx_active_bytes);
        if active_fell < NOISE_BYTES {
            continue;
        }
        // Up to the moment before the next release (or the end).
        let next = releases.get(j + 1).copied().unwrap_or(trace.events.len());
        let end_t = trace.events[next - 1].t_secs;
        let rss_after = trace.events[i..next]
            .iter()
            .map(|e| (e.t_secs, e.rss_bytes))
            .chain(
                trace
                    .samples
                    .iter()
                    .filter(|s| s.at >= event.t_secs && s.at <= end_t)
                    .map(|s| (s.at, s.process.rss_bytes)),
            );
        let (low, high) = rss_after.fold((u64::MAX, 0), |(lo, hi), (_, rss)| {
            (lo.min(rss), hi.max(rss))
        });
        // What the next shard added to MLX active: with the freed pages
        // reused, RSS grows by no more than that less what was freed.
        let next_grew = trace.events[i..next]
            .iter()
            .map(|e| e.mlx_active_bytes)
            .max()
            .unwrap_or(0)
            .saturating_sub(event.mlx_active_bytes);
        let if_reused = next_grew.saturating_sub(active_fell);
        let fell = before.rss_bytes.saturating_sub(low);
        let grew_on_top = high.saturating_sub(before.rss_bytes);
        if fell < active_fell / 2 && grew_on_top >= if_reused + active_fell / 2 {
            stuck.push((event, active_fell, grew_on_top));
        }
    }
    let Some((first, _, _)) = stuck.first() else {
        return;
    };
    let fell: u64 = stuck.iter().map(|(_, b, _)| b).sum();
    let grew: u64 = stuck.iter().map(|(_, _, g)| g).sum();
    let trimmed = trace
        .events
        .iter()
        .any(|e| e.kind == MarkKind::ClearCache && e.t_secs >= first.t_secs);
    found.push(FindingKind::RssDidNotFollow.said(
        format!(
            "MLX active fell by {} at {} release(s), but RSS neither fell nor was reused: it grew by \
             {} more before the next release. The freed buffers sit in MLX's cache ({} at the \
             first; clear it) or in malloc (trimmed: {})",
            human_bytes(fell),
            stuck.len(),
            human_bytes(grew),
            human_bytes(first.mlx_cache_bytes),
            if trimmed { "yes" } else { "no" }
        ),
        Some(first.t_secs),
    ));
}

fn above_expected(trace: &Trace, found: &mut Vec<Finding>) {
    let Some(expected) = trace.expected_peak_bytes() else {
        return;
    };
    let peak = trace.peak_mlx_active_bytes();
    if expected > 0 && peak > expected + expected / 4 && peak - expected >= NOISE_BYTES {
        found.push(FindingKind::AboveExpected.said(
            format!(
                "MLX active peaked at {}, {:.0} % above the {} the headers predict: something \
                 beside the walked tensors holds memory (temporaries of the transform, earlier arrays)",
                human_bytes(peak),
                (peak as f64 / expected as f64 - 1.0) * 100.0,
                human_bytes(expected)
            ),
            None,
        ));
    }
}

fn incomplete(trace: &Trace, found: &mut Vec<Finding>) {
    if let Some(end) = trace
        .events
        .iter()
        .rev()
        .find(|e| e.kind == MarkKind::WalkEnd)
        .filter(|e| e.detail.starts_with("cancelled") || e.detail.starts_with("stopped"))
    {
        found.push(FindingKind::Incomplete.said(
            format!("the walk did not finish: {}", end.detail),
            Some(end.t_secs),
        ));
    }
}

/// Whether a walk of the model fits, from the headers alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitReport {
    /// What a release-shard walk needs.
    pub release_shard_bytes: u64,
    /// What keeping everything needs.
    pub retain_bytes: u64,
    /// The tightest of: available memory, MLX's limit, the user's budget.
    pub room_bytes: u64,
    /// What sets `room_bytes`.
    pub room_from: &'static str,
    /// The report in sentences.
    pub lines: Vec<String>,
}

/// What a release-shard walk needs against this machine, MLX's memory limit
/// and an optional budget.
#[must_use]
pub fn fit_report(
    expected: &ExpectedPeaks,
    machine: &MachineMemory,
    mlx_limit_bytes: u64,
    budget_bytes: Option<u64>,
) -> FitReport {
    let mut rooms = vec![
        (machine.available_bytes, "available memory"),
        (mlx_limit_bytes, "MLX's memory limit"),
    ];
    if let Some(budget) = budget_bytes {
        rooms.push((budget, "your budget"));
    }
    let (room_bytes, room_from) = rooms
        .into_iter()
        .filter(|(b, _)| *b > 0)
        .min_by_key(|(b, _)| *b)
        .unwrap_or((0, "nothing known"));
    let verdict = |need: u64| {
        if room_bytes == 0 {
            "unknown".to_owned()
        } else if need <= room_bytes {
            format!("fits ({} spare)", human_bytes(room_bytes - need))
        } else {
            format!("does not fit ({} short)", human_bytes(need - room_bytes))
        }
    };
    let mut lines = vec![
        format!(
            "A release-shard walk needs about {}: {}.",
            human_bytes(expected.release_shard),
            verdict(expected.release_shard)
        ),
        format!(
            "Keeping everything (retain, or release-tensor with maps alive) needs {}: {}.",
            human_bytes(expected.retain),
            verdict(expected.retain)
        ),
        format!(
            "Room: {} ({room_from}); machine {} total, {} available; MLX limit {}.",
            human_bytes(room_bytes),
            human_bytes(machine.total_bytes),
            human_bytes(machine.available_bytes),
            human_bytes(mlx_limit_bytes)
        ),
    ];
    if let Some(budget) = budget_bytes {
        lines.push(format!("Budget: {}.", human_bytes(budget)));
    }
    FitReport {
        release_shard_bytes: expected.release_shard,
        retain_bytes: expected.retain,
        room_bytes,
        room_from,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::trace::TraceEvent;

    const MIB: u64 = 1 << 20;

    fn event(
        t: f64,
        kind: MarkKind,
        target: &str,
        bytes: u64,
        active: u64,
        rss: u64,
    ) -> TraceEvent {
        TraceEvent {
            bytes,
            rss_bytes: rss,
            mlx_active_bytes: active,
            ..TraceEvent::bare(t, kind, target.into())
        }
    }

    #[test]
    fn a_release_that_frees_nothing_is_named() {
        let mut trace = Trace::new("t");
        trace.events = vec![
            event(0.0, MarkKind::WalkStep, "a", 8 * MIB, 8 * MIB, 100 * MIB),
            event(0.1, MarkKind::Release, "a", 8 * MIB, 8 * MIB, 100 * MIB),
            event(0.2, MarkKind::WalkStep, "b", 8 * MIB, 16 * MIB, 108 * MIB),
            event(0.3, MarkKind::Release, "b", 8 * MIB, 8 * MIB, 100 * MIB),
        ];
        let found = findings(&trace);
        let finding = found
            .iter()
            .find(|f| f.code == FindingKind::ReleaseFreedNothing)
            .expect("the trap is found");
        assert!(
            finding.message.contains("releasing `a`"),
            "{}",
            finding.message
        );
        assert!(
            finding
                .message
                .contains("1 of the 2 releases of tensors of 1 MiB or more"),
            "{}",
            finding.message
        );
        assert_eq!(finding.subject.t_secs, Some(0.1));
    }

    #[test]
    fn rss_that_neither_falls_nor_is_reused_is_explained() {
        let mut trace = Trace::new("t");
        trace.events = vec![
            event(0.0, MarkKind::WalkStep, "a", 8 * MIB, 8 * MIB, 100 * MIB),
            event(0.1, MarkKind::ReleaseShard, "s1", 8 * MIB, 0, 100 * MIB),
            // The next shard: RSS grows on top of what was freed.
            event(0.2, MarkKind::WalkStep, "b", 8 * MIB, 8 * MIB, 108 * MIB),
            event(0.3, MarkKind::ReleaseShard, "s2", 8 * MIB, 0, 108 * MIB),
        ];
        let found = findings(&trace);
        let finding = found
            .iter()
            .find(|f| f.code == FindingKind::RssDidNotFollow)
            .expect("found");
        assert!(
            finding.message.contains("at 1 release(s)"),
            "{}",
            finding.message
        );
        assert!(
            finding.message.contains("trimmed: no"),
            "{}",
            finding.message
        );
        // The freed pages reused for the next shard (RSS flat): healthy.
        trace.events[2].rss_bytes = 100 * MIB;
        trace.events[3].rss_bytes = 100 * MIB;
        assert!(findings(&trace).is_empty());
        // RSS falling a moment after the release (a later sample): healthy.
        trace.events[2].rss_bytes = 108 * MIB;
        trace.samples.push(crate::memory::Sample {
            at: 0.15,
            process: crate::memory::ProcessFigures {
                rss_bytes: 92 * MIB,
                ..crate::memory::ProcessFigures::default()
            },
            mlx: None,
            gpu: None,
        });
        assert!(findings(&trace).is_empty());
    }

    #[test]
    fn the_fit_report_takes_the_tightest_room() {
        let expected = ExpectedPeaks {
            retain: 100 * MIB,
            release_tensor: 100 * MIB,
            release_shard: 10 * MIB,
        };
        let machine = MachineMemory {
            total_bytes: 1000 * MIB,
            available_bytes: 500 * MIB,
        };
        let report = fit_report(&expected, &machine, 400 * MIB, Some(50 * MIB));
        assert_eq!(report.room_bytes, 50 * MIB);
        assert_eq!(report.room_from, "your budget");
        assert!(report.lines[0].contains("fits"), "{}", report.lines[0]);
        assert!(
            report.lines[1].contains("does not fit"),
            "{}",
            report.lines[1]
        );
        let report = fit_report(&expected, &machine, 400 * MIB, None);
        assert_eq!(report.room_from, "MLX's memory limit");
    }
}
