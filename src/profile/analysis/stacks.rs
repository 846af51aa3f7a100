//! Source lines from inside a recorded job: the frames and stacks its
//! probe sends (each once, then by number), and what memory grew while each
//! line was executing.
//!
//! Attribution: every probe sample names the stack of the job's main thread
//! at that moment, and those of its other threads. The working stack is the
//! main thread's, unless the main thread is waiting (in `threading`,
//! `queue`, `concurrent.futures`, `multiprocessing.pool`) and another thread
//! is not: then that thread's. The growth of MLX active memory since that
//! process's last sample goes to its working stack, and so does the growth
//! of the tree's RSS since the recorder's last sample (to the stack the job
//! last reported). A stack's line is its innermost frame in the job's own
//! code; frames inside MLX, mlx-lm, the standard library and installed
//! packages are kept in the stack but folded when a line is named.
//!
//! The analysis is a replay of what a trace keeps (the probe's samples, the
//! recorder's samples, the events, in time order): `record` and
//! `weightscope report` on its saved trace give the same lines.
//!
//! Two figures per line: what grew while it executed (every allocation it
//! caused, freed or not), and what of that was still held at the peak. The
//! second is a ledger: growth is pushed with its stack, and a drop takes
//! back the latest growth first (a shard's tensors, freed before the next
//! shard's are loaded, leave nothing in it); what is left at the peak is
//! what each line was holding when memory was highest.

use std::collections::HashMap;

use serde::Serialize;

use super::compare::{Difference, differences};
use crate::memory::{MarkKind, Sample};
use crate::profile::TraceEvent;
use crate::profile::trace::stacks::{Frame, StackSample, TraceStacks, position};

/// A line of the job and the memory that grew while it executed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineGrowth {
    /// The line (the innermost frame of the job's own code).
    #[serde(flatten)]
    pub frame: Frame,
    /// Of the memory held at the peak (MLX active when the job uses MLX,
    /// else RSS), the bytes that grew while this line executed.
    pub held_at_peak_bytes: u64,
    /// Its share of what lines held at the peak (0 to 1).
    pub share: f64,
    /// All the growth while it executed (MLX active, else RSS), freed or not.
    pub grew_bytes: u64,
    /// RSS growth while it executed.
    pub rss_grew_bytes: u64,
}

/// A line's growth within a phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseLine {
    /// The line.
    #[serde(flatten)]
    pub frame: Frame,
    /// What grew while it executed in the phase.
    pub grew_bytes: u64,
    /// Its share of the phase's growth (0 to 1).
    pub share: f64,
}

/// The time from one of the job's marks to the next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// The mark that starts it ("start" for the time before the first).
    pub mark: String,
    /// When it starts and ends, on the recording's clock.
    pub start_secs: f64,
    /// When it ends.
    pub end_secs: f64,
    /// The highest figure in it (MLX active with MLX, else RSS).
    pub peak_bytes: u64,
    /// All that grew in it.
    pub grew_bytes: u64,
    /// The lines that grew most in it, most first (at most 5).
    pub lines: Vec<PhaseLine>,
}

/// A file the job loaded (its `mx.load`) and whether it was released: the
/// job's memory (MLX active with MLX, else RSS) rose past where it was at
/// the load (by more than a MiB) and later fell back to it (every array
/// made since freed; before it rises, what is freed lowers that level), and
/// nothing of what grew after it, before the next load, is held by a ledger
/// in which a fall takes back the latest growth first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileHeld {
    /// The file.
    pub path: String,
    /// When it was loaded.
    pub loaded_secs: f64,
    /// The job's memory when it was loaded.
    pub level_bytes: u64,
    /// When memory fell back to that level (none: held to the end, or
    /// never materialized).
    pub released_secs: Option<f64>,
    /// Whether memory rose past the level after the load and had not
    /// fallen back to it at the last sample, or fell back only as the job
    /// ended (with every other file, after the last load).
    pub held: bool,
    /// Held until the job ended (not released while it ran).
    pub until_exit: bool,
}

/// Releases of several files this close together after the last load are
/// one moment: the job ending with all of them.
const ENDED_TOGETHER_SECS: f64 = 0.1;

/// What the stacks say about a recording: the replay's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Analysis {
    /// The working stack at the peak (MLX active with MLX, else RSS).
    pub peak_stack: Vec<Frame>,
    /// The working stack at the last probe sample.
    pub last_stack: Vec<Frame>,
    /// The job's lines by what they held at the peak, then by growth.
    pub lines: Vec<LineGrowth>,
    /// Between the job's marks (none without marks).
    pub phases: Vec<Phase>,
    /// Per process with MLX: its highest MLX active and its stack then.
    pub peaks_by_pid: Vec<(u32, u64, Vec<Frame>)>,
    /// Files the job loaded, in load order, and whether each was released.
    pub files_loaded: Vec<FileHeld>,
    /// Growth by whole stack (the figure of `lines`): each stack's
    /// position in the trace's `stacks`, what grew while it worked and what
    /// of that was held at the peak.
    pub by_stack: Vec<StackGrowth>,
}

/// What grew while one stack worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackGrowth {
    /// Its position in the trace's `stacks`.
    pub stack: u32,
    /// All that grew.
    pub grew_bytes: u64,
    /// What of it was held at the peak.
    pub held_at_peak_bytes: u64,
}

/// A line's bytes held at the peak in two recordings.
pub type LineDifference = Difference<Frame>;

/// Where two recordings' peaks differ, by line (the same file, line and
/// function in both; its code may have changed): most changed first, lines
/// that held nothing in either left out.
#[must_use]
pub fn line_differences(a: &[LineGrowth], b: &[LineGrowth]) -> Vec<LineDifference> {
    let lines = |side: &[LineGrowth]| {
        side.iter()
            .map(|l| {
                // By place: a line whose code changed is the same line.
                let place = Frame {
                    text: String::new(),
                    ..l.frame.clone()
                };
                (place, l.held_at_peak_bytes)
            })
            .collect::<Vec<_>>()
    };
    differences(lines(a), lines(b), |x, y| x.label().cmp(&y.label()))
}

/// Growth by key, latest last; a drop takes back the latest first. At each
/// new high, what it holds per key is kept.
///
/// Linear in samples: what each key holds is kept as a running total
/// (`held_now`), and the copy of it at the peak is taken lazily, at the
/// first fall after a new high (until then the state is the peak's), so a
/// long rise costs one copy, not one per sample.
#[derive(Debug, Default, Clone)]
struct LineCharges {
    entries: Vec<(Option<usize>, u64)>,
    /// What each key holds now (the sum of its entries).
    held_now: HashMap<usize, u64>,
    last: u64,
    peak: u64,
    /// What each key held at the peak; stale while `peak_pending`.
    at_peak: HashMap<usize, u64>,
    /// A new high was reached and `at_peak` not yet copied from it.
    peak_pending: bool,
    peak_key: Option<usize>,
    /// The last key recorded (the line last seen).
    last_key: Option<usize>,
    seen: bool,
    grew: HashMap<usize, u64>,
    /// (phase, key) -> growth in that phase.
    grew_in_phase: HashMap<(usize, usize), u64>,
}

impl LineCharges {
    /// The figure is `now`, with `key` executing (none: no key is charged,
    /// but the growth is held in order).
    fn record(&mut self, key: Option<usize>, now: u64, phase: usize) {
        self.last_key = key.or(self.last_key);
        if now > self.last {
            let grew = now - self.last;
            if let Some(k) = key {
                let total = self.grew.entry(k).or_insert(0);
                *total = total.saturating_add(grew);
                let total = self.grew_in_phase.entry((phase, k)).or_insert(0);
                *total = total.saturating_add(grew);
                let held = self.held_now.entry(k).or_insert(0);
                *held = held.saturating_add(grew);
            }
            match self.entries.last_mut() {
                Some((k, bytes)) if *k == key => *bytes = bytes.saturating_add(grew),
                _ => self.entries.push((key, grew)),
            }
        } else if now < self.last {
            self.take_peak();
            let mut drop = self.last - now;
            while drop > 0 {
                let Some((k, bytes)) = self.entries.last_mut() else {
                    break;
                };
                let taken = drop.min(*bytes);
                *bytes -= taken;
                drop -= taken;
                if let Some(k) = *k
                    && let Some(held) = self.held_now.get_mut(&k)
                {
                    *held -= taken.min(*held);
                    if *held == 0 {
                        self.held_now.remove(&k);
                    }
                }
                if *bytes == 0 {
                    self.entries.pop();
                }
            }
        }
        self.last = now;
        // The first moment of the highest figure (a plateau keeps it).
        if now > self.peak || !self.seen {
            self.seen = true;
            self.peak = now;
            // A sample without a stack (the probe's last, at exit): the
            // line last seen.
            self.peak_key = key.or(self.last_key);
            self.peak_pending = true;
        }
    }

    /// As [`LineCharges::record`], with what grew charged to no line
    /// though `key` was executing (what an attached process held before
    /// the recording began): where the job was, not what its line grew.
    fn record_uncharged(&mut self, key: Option<usize>, now: u64, phase: usize) {
        self.record(None, now, phase);
        if key.is_some() {
            self.last_key = key;
            if self.peak_pending && self.peak == now {
                self.peak_key = key;
            }
        }
    }

    /// Copies what each key holds into `at_peak` when a new high has not
    /// been copied yet (the state has not fallen since it).
    fn take_peak(&mut self) {
        if self.peak_pending {
            self.peak_pending = false;
            self.at_peak.clone_from(&self.held_now);
        }
    }

    /// What each key holds now.
    fn held(&self) -> HashMap<usize, u64> {
        self.held_now.clone()
    }
}

/// One moment of the replay, in time order (ties: events, then the
/// probe's samples, then the recorder's).
enum Step<'a> {
    Event(&'a TraceEvent),
    Probe(&'a StackSample),
    Tree(&'a Sample),
}

impl Step<'_> {
    fn order(&self) -> (f64, u8) {
        match self {
            Self::Event(e) => (e.t_secs, 0),
            Self::Probe(s) => (s.t, 1),
            Self::Tree(s) => (s.at, 2),
        }
    }
}

/// Growth after a load smaller than this is not the file's arrays (Python
/// objects, MLX's small arrays).
const LOAD_NOISE: u64 = 1 << 20;

/// The replay's state.
#[derive(Default)]
struct Replay {
    mlx: HashMap<u32, LineCharges>,
    active: HashMap<u32, u64>,
    rss: LineCharges,
    current: HashMap<u32, Option<u32>>,
    last_pid: Option<u32>,
    /// The job's memory now (MLX active with MLX, else RSS).
    level: u64,
    /// Each load: the file, when, the level then, whether memory rose
    /// past it since, and when it fell back.
    loads: Vec<(String, f64, u64, bool, Option<f64>)>,
    /// The growth since each load, by the load last made (a fall takes
    /// back the latest growth first).
    by_load: LineCharges,
    phase: usize,
    /// Each phase's highest level.
    phase_peaks: Vec<u64>,
    marks: Vec<(String, f64)>,
    /// The next tree sample is charged to no line (attached: what the
    /// process held before the recording began).
    uncharged_first: bool,
}

/// Replays a recording: its probe samples (`stacks`), the recorder's
/// `samples` and its `events`, in time order. `attached`: the process ran
/// before the recording, so what its first sample holds was there before
/// any line seen, and is charged to none.
#[must_use]
pub fn analyse(
    stacks: Option<&TraceStacks>,
    samples: &[Sample],
    events: &[TraceEvent],
    attached: bool,
) -> Analysis {
    let empty = TraceStacks::default();
    let st = stacks.unwrap_or(&empty);
    let uses_mlx = st.samples.iter().any(|s| s.active.is_some());
    let mut steps: Vec<Step> = events
        .iter()
        .map(Step::Event)
        .chain(st.samples.iter().map(Step::Probe))
        .chain(samples.iter().map(Step::Tree))
        .collect();
    steps.sort_by(|a, b| {
        let (ta, oa) = a.order();
        let (tb, ob) = b.order();
        ta.total_cmp(&tb).then(oa.cmp(&ob))
    });
    let mut r = Replay {
        phase_peaks: vec![0],
        uncharged_first: attached,
        ..Replay::default()
    };
    for step in steps {
        match step {
            Step::Event(e) => r.event(e),
            Step::Probe(s) => r.probe(st, s, uses_mlx),
            Step::Tree(s) => r.tree(s, uses_mlx),
        }
    }
    r.finish(st, samples)
}

impl Replay {
    fn event(&mut self, e: &TraceEvent) {
        match e.kind {
            MarkKind::Load => {
                self.loads
                    .push((e.target.clone(), e.t_secs, self.level, false, None));
            }
            MarkKind::JobMark => {
                self.phase += 1;
                self.phase_peaks.push(self.level);
                self.marks.push((e.target.clone(), e.t_secs));
            }
            _ => {}
        }
    }

    fn probe(&mut self, st: &TraceStacks, s: &StackSample, uses_mlx: bool) {
        let working = st.working(s);
        let key = working.map(|w| w as usize);
        if let Some(now) = s.active {
            self.mlx
                .entry(s.pid)
                .or_default()
                .record(key, now, self.phase);
            self.active.insert(s.pid, now);
        }
        if uses_mlx {
            let total = self
                .active
                .values()
                .fold(0_u64, |a, &b| a.saturating_add(b));
            self.level(s.t, total);
        }
        self.current.insert(s.pid, working);
        if working.is_some() {
            self.last_pid = Some(s.pid);
        }
    }

    fn tree(&mut self, s: &Sample, uses_mlx: bool) {
        let uncharged = std::mem::take(&mut self.uncharged_first);
        let key = self
            .last_pid
            .and_then(|pid| self.current.get(&pid).copied().flatten())
            .map(|k| k as usize);
        if uncharged {
            self.rss
                .record_uncharged(key, s.process.rss_bytes, self.phase);
        } else {
            self.rss.record(key, s.process.rss_bytes, self.phase);
        }
        if !uses_mlx {
            self.level(s.at, s.process.rss_bytes);
        }
    }

    /// The job's memory is `now` at `t`: phases' peaks, loads risen past
    /// their level or fallen back to it.
    fn level(&mut self, t: f64, now: u64) {
        self.level = now;
        let last_load = self.loads.len().checked_sub(1);
        self.by_load.record(last_load, now, 0);
        if let Some(peak) = self.phase_peaks.last_mut() {
            *peak = (*peak).max(now);
        }
        for (_, loaded, level, risen, released) in &mut self.loads {
            if *loaded >= t || released.is_some() {
                continue;
            }
            if !*risen {
                // Until the file's arrays grow, what is freed lowers its
                // level (the previous file's sources, freed after this
                // load, were never this file's).
                if now < *level {
                    *level = now;
                } else if now > *level + LOAD_NOISE {
                    *risen = true;
                }
            } else if now <= *level {
                *released = Some(t);
            }
        }
    }

    /// The innermost frame of `stack` in the job's own code (the innermost
    /// of all when every frame is a library's).
    fn line_of(st: &TraceStacks, stack: usize) -> Option<u32> {
        let frames = st.stacks.get(stack)?;
        frames
            .iter()
            .copied()
            .find(|&f| st.frames.get(f as usize).is_some_and(|f| !f.is_library()))
            .or_else(|| frames.first().copied())
    }

    fn finish(mut self, st: &TraceStacks, samples: &[Sample]) -> Analysis {
        for ledger in self.mlx.values_mut() {
            ledger.take_peak();
        }
        self.rss.take_peak();
        let owned = |stack: usize| -> Vec<Frame> {
            st.frames_of(position(stack)).into_iter().cloned().collect()
        };
        // The process whose MLX active went highest, else the tree's RSS.
        let main = self
            .mlx
            .values()
            .filter(|l| l.seen)
            .max_by_key(|l| l.peak)
            .filter(|l| l.peak_key.is_some())
            .unwrap_or(&self.rss);
        let peak_stack = main
            .peak_key
            .or(self.rss.peak_key)
            .map(owned)
            .unwrap_or_default();
        let last_stack = self
            .last_pid
            .and_then(|pid| self.current.get(&pid).copied().flatten())
            .map(|s| owned(s as usize))
            .unwrap_or_default();
        let by_line = |growth: &HashMap<usize, u64>| {
            let mut lines: HashMap<u32, u64> = HashMap::new();
            for (&stack, &bytes) in growth {
                if let Some(line) = Self::line_of(st, stack) {
                    let sum = lines.entry(line).or_insert(0);
                    *sum = sum.saturating_add(bytes);
                }
            }
            lines
        };
        let frame = |line: u32| st.frames.get(line as usize).cloned();
        let held = by_line(&main.at_peak);
        let grew = by_line(&main.grew);
        let rss = by_line(&self.rss.grew);
        let total = held.values().fold(0_u64, |a, &b| a.saturating_add(b));
        let mut lines: Vec<LineGrowth> = grew
            .iter()
            .filter_map(|(&line, &grew_bytes)| {
                let held_at_peak_bytes = held.get(&line).copied().unwrap_or(0);
                Some(LineGrowth {
                    frame: frame(line)?,
                    held_at_peak_bytes,
                    share: fraction(held_at_peak_bytes, total),
                    grew_bytes,
                    rss_grew_bytes: rss.get(&line).copied().unwrap_or(0),
                })
            })
            .collect();
        lines.sort_by(|a, b| {
            (b.held_at_peak_bytes, b.grew_bytes)
                .cmp(&(a.held_at_peak_bytes, a.grew_bytes))
                .then_with(|| a.frame.label().cmp(&b.frame.label()))
        });
        let phases = self.phases(st, main, samples);
        let mut peaks_by_pid: Vec<(u32, u64, Vec<Frame>)> = self
            .mlx
            .iter()
            .map(|(&pid, l)| (pid, l.peak, l.peak_key.map(owned).unwrap_or_default()))
            .collect();
        peaks_by_pid.sort_by_key(|p| p.0);
        // Held: memory never fell back to the file's level, or what grew
        // after it (by the ledger) is still there.
        let files_loaded = self.files_loaded();
        let mut by_stack: Vec<StackGrowth> = main
            .grew
            .iter()
            .map(|(&stack, &grew_bytes)| StackGrowth {
                stack: position(stack),
                grew_bytes,
                held_at_peak_bytes: main.at_peak.get(&stack).copied().unwrap_or(0),
            })
            .collect();
        by_stack.sort_by_key(|g| g.stack);
        Analysis {
            peak_stack,
            last_stack,
            lines,
            phases,
            peaks_by_pid,
            files_loaded,
            by_stack,
        }
    }

    /// The phases between the job's marks: each one's peak (from the
    /// recorder's samples) and its lines by growth.
    /// Each `mx.load`: whether its arrays were still held at the end, or
    /// went only as the job ended. Held: memory never fell back to the
    /// file's level, or what grew after it (by the ledger) is still there.
    fn files_loaded(&self) -> Vec<FileHeld> {
        let by_load = self.by_load.held();
        // Files whose arrays all went at one moment after the last load
        // (two or more together: a job that kept them, ending) were held
        // until the job ended, not released while it ran. A file released
        // alone after the last load is a job releasing its last file.
        let last_load = self
            .loads
            .iter()
            .map(|l| l.1)
            .fold(f64::NEG_INFINITY, f64::max);
        let after: Vec<f64> = self
            .loads
            .iter()
            .filter(|l| l.3)
            .filter_map(|l| l.4)
            .filter(|&r| r >= last_load)
            .collect();
        let first_after = after.iter().copied().fold(f64::INFINITY, f64::min);
        let together = after.len() >= 2
            && after
                .iter()
                .all(|&r| r - first_after <= ENDED_TOGETHER_SECS);
        self.loads
            .iter()
            .enumerate()
            .map(|(i, (path, t, level, risen, released))| {
                let still = by_load.get(&i).is_some_and(|&b| b > LOAD_NOISE);
                let at_exit = together && *risen && released.is_some_and(|r| r >= last_load);
                FileHeld {
                    path: path.clone(),
                    loaded_secs: *t,
                    level_bytes: *level,
                    released_secs: if still { None } else { *released },
                    held: still || (*risen && released.is_none()) || at_exit,
                    until_exit: at_exit || (*risen && released.is_none()),
                }
            })
            .collect()
    }

    fn phases(&self, st: &TraceStacks, main: &LineCharges, samples: &[Sample]) -> Vec<Phase> {
        if self.marks.is_empty() {
            return Vec::new();
        }
        let end = samples
            .last()
            .map_or(0.0, |s| s.at)
            .max(st.samples.last().map_or(0.0, |s| s.t));
        let mut starts = vec![("start".to_owned(), 0.0)];
        starts.extend(self.marks.iter().cloned());
        starts
            .iter()
            .enumerate()
            .map(|(i, (mark, start))| {
                let stop = starts.get(i + 1).map_or(end, |(_, t)| *t);
                let peak_bytes = self.phase_peaks.get(i).copied().unwrap_or(0);
                let mut by_line: HashMap<u32, u64> = HashMap::new();
                for (&(phase, stack), &bytes) in &main.grew_in_phase {
                    if phase == i
                        && let Some(line) = Self::line_of(st, stack)
                    {
                        let sum = by_line.entry(line).or_insert(0);
                        *sum = sum.saturating_add(bytes);
                    }
                }
                let grew_bytes = by_line.values().fold(0_u64, |a, &b| a.saturating_add(b));
                let mut lines: Vec<PhaseLine> = by_line
                    .into_iter()
                    .filter_map(|(line, bytes)| {
                        Some(PhaseLine {
                            frame: st.frames.get(line as usize)?.clone(),
                            grew_bytes: bytes,
                            share: fraction(bytes, grew_bytes),
                        })
                    })
                    .collect();
                lines.sort_by(|a, b| {
                    b.grew_bytes
                        .cmp(&a.grew_bytes)
                        .then_with(|| a.frame.label().cmp(&b.frame.label()))
                });
                lines.truncate(5);
                Phase {
                    mark: mark.clone(),
                    start_secs: *start,
                    end_secs: stop,
                    peak_bytes,
                    grew_bytes,
                    lines,
                }
            })
            .collect()
    }
}

#[allow(clippy::cast_precision_loss)] // a share: 52 bits are plenty
fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The frames of `stack` as one would read them: the job's own innermost
/// frame first, then the library frames inside it folded into a count.
#[must_use]
pub fn describe(stack: &[Frame]) -> String {
    let Some(own) = stack.iter().position(|f| !f.is_library()) else {
        return stack.first().map(Frame::label).unwrap_or_default();
    };
    let frame = &stack[own];
    let code = if frame.text.is_empty() {
        String::new()
    } else {
        format!(" ({})", frame.text)
    };
    let inside = match own {
        0 => String::new(),
        1 => ", inside 1 library frame".to_owned(),
        n => format!(", inside {n} library frames"),
    };
    format!("{}{code}{inside}", frame.label())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::ProcessFigures;
    use crate::profile::trace::stacks::Stacks;

    const MIB: u64 = 1 << 20;

    fn frame(file: &str, line: u32, function: &str) -> Frame {
        Frame {
            file: file.into(),
            line,
            function: function.into(),
            text: String::new(),
        }
    }

    fn tree(at: f64, rss: u64) -> Sample {
        Sample {
            at,
            process: ProcessFigures {
                rss_bytes: rss,
                ..ProcessFigures::default()
            },
            mlx: None,
            gpu: None,
        }
    }

    fn event(t_secs: f64, kind: MarkKind, target: &str) -> TraceEvent {
        TraceEvent::bare(t_secs, kind, target.into())
    }

    #[test]
    fn growth_goes_to_the_innermost_line_of_the_jobs_own_code() {
        let mut s = Stacks::default();
        let _ = s.define_frame(
            7,
            0,
            frame("/venv/lib/python3.11/site-packages/mlx/x.py", 3, "load"),
        );
        let _ = s.define_frame(7, 1, frame("/work/fold.py", 26, "main"));
        let _ = s.define_frame(7, 2, frame("/work/fold.py", 30, "main"));
        let _ = s.define_stack(7, 0, &[0, 1]);
        let _ = s.define_stack(7, 1, &[2]);
        s.sample(0.0, 7, Some(0), &[], Some(100));
        s.sample(0.1, 7, Some(0), &[], Some(300));
        s.sample(0.2, 7, Some(1), &[], Some(250)); // 50 freed: taken from line 26's
        s.sample(0.3, 7, Some(1), &[], Some(260));
        let trace = s.to_trace().expect("samples");
        let a = analyse(Some(&trace), &[tree(0.35, 4096)], &[], false);
        let lines = &a.lines;
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].frame.line, 26, "{lines:?}");
        assert_eq!(lines[0].grew_bytes, 300);
        assert_eq!(lines[0].held_at_peak_bytes, 300, "the peak was at 300");
        assert_eq!(lines[1].held_at_peak_bytes, 0);
        assert_eq!(lines[1].grew_bytes, 10);
        assert!((lines[0].share - 1.0).abs() < 1e-12);
        assert_eq!(a.peak_stack[1].line, 26);
        assert_eq!(
            describe(&a.peak_stack),
            "fold.py:26 in main, inside 1 library frame"
        );
        assert_eq!(lines[1].rss_grew_bytes, 4096, "the current stack's line");
        assert_eq!(a.last_stack[0].line, 30);
        assert_eq!(a.peaks_by_pid, vec![(7, 300, a.peak_stack.clone())]);
    }

    /// Attached (`record --pid`, stacks read from outside, no MLX): what
    /// the process held at the first sample was there before any line was
    /// seen, so no line is charged with it; the stack there is still where
    /// the job was at that peak; what grows after is charged as always.
    #[test]
    fn an_attached_process_charges_its_first_sample_to_no_line() {
        let mut s = Stacks::default();
        let _ = s.define_frame(9, 0, frame("/work/job.py", 5, "hold"));
        let _ = s.define_frame(9, 1, frame("/work/job.py", 8, "grow"));
        let _ = s.define_stack(9, 0, &[0]);
        let _ = s.define_stack(9, 1, &[1]);
        s.sample(0.0, 9, Some(0), &[], None);
        s.sample(0.2, 9, Some(1), &[], None);
        let trace = s.to_trace().expect("samples");
        let held = [tree(0.1, 80 * MIB)];
        let a = analyse(Some(&trace), &held, &[], true);
        assert!(a.lines.is_empty(), "{:?}", a.lines);
        assert_eq!(describe(&a.peak_stack), "job.py:5 in hold");
        // Started rather than attached, the same sample is hold()'s growth.
        let a = analyse(Some(&trace), &held, &[], false);
        assert_eq!(a.lines[0].rss_grew_bytes, 80 * MIB);
        // Growth after the first sample goes to the line that made it.
        let grown = [tree(0.1, 80 * MIB), tree(0.3, 144 * MIB)];
        let a = analyse(Some(&trace), &grown, &[], true);
        assert_eq!(a.lines.len(), 1, "{:?}", a.lines);
        assert_eq!(a.lines[0].frame.function, "grow");
        assert_eq!(a.lines[0].rss_grew_bytes, 64 * MIB);
        assert_eq!(describe(&a.peak_stack), "job.py:8 in grow");
    }

    #[test]
    fn a_trace_keeps_every_probe_sample_and_reads_old_ones() {
        let mut s = Stacks::default();
        let _ = s.define_frame(1, 0, frame("/work/a.py", 1, "f"));
        let _ = s.define_frame(1, 1, frame("/work/a.py", 2, "g"));
        let _ = s.define_stack(1, 0, &[0]);
        let _ = s.define_stack(1, 1, &[1, 0]);
        s.sample(0.5, 1, Some(0), &[], None);
        s.sample(1.0, 1, Some(1), &[0], Some(12));
        s.rank(1, 3);
        let trace = s.to_trace().expect("stacks");
        let json = serde_json::to_string(&trace).expect("json");
        assert!(json.contains("[1.0,1,1,12,[0]]"), "{json}");
        let back: TraceStacks = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, trace);
        assert!(trace.at(0.1).is_none(), "before the first sample");
        assert_eq!(trace.at(0.7).expect("a stack")[0].line, 1);
        let later = trace.at(5.0).expect("a stack");
        assert_eq!((later[0].line, later[1].line), (2, 1));
        assert_eq!(trace.threads_at(5.0).len(), 2, "main and one more");
        let old: TraceStacks = serde_json::from_str(
            r#"{"frames":[{"file":"a.py","line":1,"function":"f"}],"stacks":[[0]],"samples":[[0.5,0]]}"#,
        )
        .expect("an older trace");
        assert_eq!(old.samples[0].stack, Some(0));
        assert_eq!(old.samples[0].active, None);
    }

    #[test]
    fn a_job_that_releases_holds_one_step_at_its_peak() {
        let mut s = Stacks::default();
        let _ = s.define_frame(1, 0, frame("/work/fold.py", 10, "load"));
        let _ = s.define_frame(1, 1, frame("/work/fold.py", 20, "free"));
        let _ = s.define_stack(1, 0, &[0]);
        let _ = s.define_stack(1, 1, &[1]);
        let mut t = 0.0;
        let mut events = Vec::new();
        for shard in 0..4 {
            events.push(event(t, MarkKind::Load, &format!("/m/{shard}.safetensors")));
            t += 0.1;
            s.sample(t, 1, Some(0), &[], Some(8 * MIB));
            t += 0.1;
            if shard < 3 {
                s.sample(t, 1, Some(1), &[], Some(0));
            }
            t += 0.1;
        }
        let a = analyse(s.to_trace().as_ref(), &[], &events, false);
        assert_eq!(a.lines[0].frame.line, 10);
        assert_eq!(a.lines[0].grew_bytes, 32 * MIB, "every shard loaded");
        assert_eq!(
            a.lines[0].held_at_peak_bytes,
            8 * MIB,
            "one shard held at a time"
        );
        let held: Vec<bool> = a.files_loaded.iter().map(|f| f.held).collect();
        assert_eq!(
            held,
            vec![false, false, false, true],
            "only the last shard is still held"
        );
        assert!(a.files_loaded[0].released_secs.is_some());
    }

    #[test]
    fn a_fold_holds_every_file_though_each_source_is_freed_after_the_next_load() {
        let mut s = Stacks::default();
        let _ = s.define_frame(1, 0, frame("/work/fold.py", 9, "<module>"));
        let _ = s.define_stack(1, 0, &[0]);
        let mut events = Vec::new();
        let mut t = 0.0;
        let mut kept = 0;
        for shard in 0..3 {
            // Load the next file while the last one's source is alive,
            events.push(event(t, MarkKind::Load, &format!("/m/{shard}.safetensors")));
            t += 0.1;
            // this file's source and its folded output,
            s.sample(t, 1, Some(0), &[], Some(kept + 16 * MIB + 16 * MIB));
            t += 0.1;
            // then the last one's source freed (its output kept).
            kept += 16 * MIB;
            s.sample(t, 1, Some(0), &[], Some(kept + 16 * MIB));
            t += 0.1;
        }
        let a = analyse(s.to_trace().as_ref(), &[], &events, false);
        let held: Vec<bool> = a.files_loaded.iter().map(|f| f.held).collect();
        assert_eq!(held, vec![true, true, true], "{:?}", a.files_loaded);
    }

    #[test]
    fn phases_between_marks_name_their_own_lines() {
        let mut s = Stacks::default();
        let _ = s.define_frame(1, 0, frame("/work/job.py", 5, "embed"));
        let _ = s.define_frame(1, 1, frame("/work/job.py", 9, "layers"));
        let _ = s.define_stack(1, 0, &[0]);
        let _ = s.define_stack(1, 1, &[1]);
        s.sample(0.1, 1, Some(0), &[], Some(10));
        s.sample(0.2, 1, Some(0), &[], Some(30));
        s.sample(1.1, 1, Some(1), &[], Some(20));
        s.sample(1.2, 1, Some(1), &[], Some(90));
        let events = vec![event(1.0, MarkKind::JobMark, "layers")];
        let a = analyse(s.to_trace().as_ref(), &[], &events, false);
        assert_eq!(a.phases.len(), 2);
        assert_eq!(a.phases[0].mark, "start");
        assert_eq!(a.phases[0].lines[0].frame.line, 5);
        assert_eq!(a.phases[0].grew_bytes, 30);
        assert_eq!(a.phases[1].mark, "layers");
        assert_eq!(a.phases[1].lines.len(), 1);
        assert_eq!(a.phases[1].lines[0].frame.line, 9);
        assert_eq!(a.phases[1].grew_bytes, 70);
    }

    #[test]
    fn a_waiting_main_thread_gives_the_growth_to_the_thread_that_works() {
        let mut s = Stacks::default();
        let _ = s.define_frame(1, 0, frame("/usr/lib/python3.11/threading.py", 320, "wait"));
        let _ = s.define_frame(1, 1, frame("/work/job.py", 40, "main"));
        let _ = s.define_frame(1, 2, frame("/work/job.py", 12, "worker"));
        let _ = s.define_stack(1, 0, &[0, 1]);
        let _ = s.define_stack(1, 1, &[2]);
        s.sample(0.1, 1, Some(0), &[1], Some(0));
        s.sample(0.2, 1, Some(0), &[1], Some(64));
        let a = analyse(s.to_trace().as_ref(), &[], &[], false);
        assert_eq!(a.lines[0].frame.line, 12, "{:?}", a.lines);
        assert_eq!(a.lines[0].held_at_peak_bytes, 64);
    }

    #[test]
    fn two_recordings_differ_by_line() {
        let line = |l: u32, held: u64| LineGrowth {
            frame: frame("/work/fold.py", l, "main"),
            held_at_peak_bytes: held,
            share: 0.0,
            grew_bytes: held,
            rss_grew_bytes: 0,
        };
        let a = [line(26, 100), line(30, 10)];
        let b = [line(26, 20), line(40, 50), line(50, 0)];
        let d = line_differences(&a, &b);
        let got: Vec<(u32, i128)> = d.iter().map(|d| (d.key.line, d.change())).collect();
        assert_eq!(got, vec![(26, -80), (40, 50), (30, -10)]);
    }

    #[test]
    fn unknown_ids_and_other_processes_are_kept_apart() {
        let mut s = Stacks::default();
        let _ = s.define_frame(1, 0, frame("/a.py", 1, "f"));
        let _ = s.define_stack(1, 0, &[0, 99]);
        s.sample(0.0, 2, Some(0), &[], Some(50)); // pid 2 never defined stack 0
        s.sample(0.1, 1, Some(-1), &[], Some(50));
        let a = analyse(s.to_trace().as_ref(), &[], &[], false);
        assert!(a.lines.is_empty());
        s.sample(0.2, 1, Some(0), &[], Some(80));
        let a = analyse(s.to_trace().as_ref(), &[], &[], false);
        assert_eq!(a.lines[0].grew_bytes, 30, "from the last figure, 50");
        assert_eq!(a.lines[0].held_at_peak_bytes, 30);
    }
}
