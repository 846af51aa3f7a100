//! The stacks a recorded job's probe sends, as the trace keeps them: each
//! frame and stack once, then by number (bounded: past the caps a frame or
//! stack is counted, not kept), the probe's samples naming them, the ranks
//! and the censuses. What they say is `analysis::stacks`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// One frame of a Python stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// The source file, as the job's Python names it.
    pub file: String,
    /// The line executing.
    pub line: u32,
    /// The function (qualified name).
    pub function: String,
    /// The line's code, when the probe could read it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
}

impl Frame {
    /// Whether the frame is in a library rather than the job's own code:
    /// MLX, mlx-lm, the standard library, installed packages, the probe.
    #[must_use]
    pub fn is_library(&self) -> bool {
        let f = self.file.replace('\\', "/");
        f.starts_with('<')
            || f.contains("/site-packages/")
            || f.contains("/dist-packages/")
            || f.contains("/lib/python3")
            || f.contains("/mlx/")
            || f.contains("/mlx_lm/")
            || f.ends_with("weightscope_probe.py")
            || f.ends_with("sitecustomize.py")
    }

    /// `file.py:26 in main`, with the file's name only.
    #[must_use]
    pub fn label(&self) -> String {
        let name = self.file.rsplit(['/', '\\']).next().unwrap_or(&self.file);
        format!("{name}:{} in {}", self.line, self.function)
    }
}

/// One probe sample: when, which process, the stacks of its threads (as
/// positions in [`TraceStacks::stacks`]) and its MLX active memory.
#[derive(Debug, Clone, PartialEq)]
pub struct StackSample {
    /// Seconds on the trace's clock.
    pub t: f64,
    /// The process that sent it.
    pub pid: u32,
    /// The main thread's stack (none: no Python frame, or stacks off).
    pub stack: Option<u32>,
    /// The other threads' stacks (the probe's own thread left out).
    pub threads: Vec<u32>,
    /// MLX active memory then (none: the job has not imported MLX).
    pub active: Option<u64>,
}

/// The file form of a [`StackSample`]: `[t, stack (-1: none), pid, active
/// (null: none), [threads]]`, the last left out when empty; `[t, stack]`
/// in traces written before pids and figures were kept.
#[derive(Deserialize)]
#[serde(untagged)]
enum StackSampleWire {
    Threads(f64, i64, u32, Option<u64>, Vec<u32>),
    Full(f64, i64, u32, Option<u64>),
    Old(f64, u32),
}

impl Serialize for StackSample {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(4 + usize::from(!self.threads.is_empty())))?;
        seq.serialize_element(&self.t)?;
        seq.serialize_element(&self.stack.map_or(-1, i64::from))?;
        seq.serialize_element(&self.pid)?;
        seq.serialize_element(&self.active)?;
        if !self.threads.is_empty() {
            seq.serialize_element(&self.threads)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for StackSample {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (t, stack, pid, active, threads) = match StackSampleWire::deserialize(deserializer)? {
            StackSampleWire::Threads(t, s, pid, a, threads) => (t, s, pid, a, threads),
            StackSampleWire::Full(t, s, pid, a) => (t, s, pid, a, Vec::new()),
            StackSampleWire::Old(t, s) => (t, i64::from(s), 0, None, Vec::new()),
        };
        Ok(Self {
            t,
            pid,
            stack: u32::try_from(stack).ok(),
            threads,
            active,
        })
    }
}

/// The Python stacks of a recorded job as a trace keeps them: each frame
/// once, each stack once (frame positions, innermost first), every probe
/// sample, and the rank of each process of a distributed job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceStacks {
    /// Every distinct frame.
    pub frames: Vec<Frame>,
    /// Every distinct stack: positions in `frames`, innermost first.
    pub stacks: Vec<Vec<u32>>,
    /// Every probe sample, in time order.
    pub samples: Vec<StackSample>,
    /// `(pid, MLX_RANK)` of each rank of a distributed job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<(u32, u32)>,
    /// The probes' held-by walks, in time order (at most
    /// [`super::census::KEPT_WALKS`] and the one at the highest memory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<super::census::Census>,
    /// Definitions, samples and ranks past the bounds of what a trace
    /// keeps (a journal written by anything but weightscope may hold a
    /// stack of a million frames): cut or left out, counted here.
    #[serde(skip)]
    pub cut: u64,
}

/// Ranks a trace keeps (one per process of a distributed job).
const MAX_RANKS: usize = 1 << 16;

/// Something the probes sent, in the order a trace keeps it.
#[derive(Debug, Clone, PartialEq)]
pub enum StackUpdate {
    /// Frame number `.0` (the next position in `frames`).
    Frame(u32, Frame),
    /// Stack number `.0` (the next position in `stacks`).
    Stack(u32, Vec<u32>),
    /// A probe sample.
    Sample(StackSample),
    /// A process of a distributed job said its rank.
    Rank {
        /// The process.
        pid: u32,
        /// Its `MLX_RANK`.
        rank: u32,
    },
    /// A held-by walk of a probe.
    Held(super::census::Census),
}

impl TraceStacks {
    /// Takes one update; a frame or stack out of sequence is dropped.
    pub fn apply(&mut self, update: StackUpdate) {
        match update {
            StackUpdate::Frame(id, frame) => {
                if id as usize == self.frames.len() && self.frames.len() < MAX_FRAMES {
                    self.frames.push(frame);
                } else {
                    self.cut += 1;
                }
            }
            StackUpdate::Stack(id, mut frames) => {
                if id as usize == self.stacks.len() && self.stacks.len() < MAX_STACKS {
                    if frames.len() > MAX_DEPTH {
                        frames.truncate(MAX_DEPTH);
                        self.cut += 1;
                    }
                    self.stacks.push(frames);
                } else {
                    self.cut += 1;
                }
            }
            StackUpdate::Sample(mut sample) => {
                if self.samples.len() < 2 * MAX_SAMPLES {
                    sample.threads.truncate(MAX_DEPTH);
                    self.samples.push(sample);
                } else {
                    self.cut += 1;
                }
            }
            StackUpdate::Rank { pid, rank } => {
                if self.ranks.len() < MAX_RANKS {
                    self.ranks.push((pid, rank));
                } else {
                    self.cut += 1;
                }
            }
            StackUpdate::Held(walk) => {
                // Bounded: past the cap the oldest walk goes, unless it is
                // the one at the highest memory.
                if self.held.len() >= super::census::KEPT_WALKS {
                    let keep = super::census::at_peak(&self.held)
                        .map(|w| (w.t_secs, w.pid))
                        .unwrap_or_default();
                    if let Some(i) = self.held.iter().position(|w| (w.t_secs, w.pid) != keep) {
                        self.held.remove(i);
                    }
                }
                self.held.push(walk);
            }
        }
    }

    /// The frames of stack `stack`, innermost first.
    #[must_use]
    pub fn frames_of(&self, stack: u32) -> Vec<&Frame> {
        self.stacks
            .get(stack as usize)
            .map(|s| {
                s.iter()
                    .filter_map(|&f| self.frames.get(f as usize))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether stack `stack` is waiting: its innermost frame is in the
    /// standard library's waiting places (a join, a future's result, a
    /// queue, a pool).
    fn is_waiting(&self, stack: u32) -> bool {
        self.frames_of(stack).first().is_some_and(|f| {
            let file = f.file.replace('\\', "/");
            [
                "/threading.py",
                "/queue.py",
                "/concurrent/futures/_base.py",
                "/concurrent/futures/thread.py",
                "/multiprocessing/pool.py",
                "/selectors.py",
            ]
            .iter()
            .any(|w| file.ends_with(w))
        })
    }

    /// The stack doing the work in `sample`: the main thread's, unless it
    /// waits and another thread does not.
    #[must_use]
    pub fn working(&self, sample: &StackSample) -> Option<u32> {
        match sample.stack {
            Some(main) if !self.is_waiting(main) => Some(main),
            main => sample
                .threads
                .iter()
                .copied()
                .find(|&s| !self.is_waiting(s))
                .or(main),
        }
    }

    /// The last probe sample with a stack at or before `t_secs`.
    fn sample_at(&self, t_secs: f64) -> Option<&StackSample> {
        let i = self.samples.partition_point(|s| s.t <= t_secs);
        self.samples[..i]
            .iter()
            .rev()
            .find(|s| s.stack.is_some() || !s.threads.is_empty())
    }

    /// The working stack at `t_secs` (the last probe sample then),
    /// innermost frame first.
    #[must_use]
    pub fn at(&self, t_secs: f64) -> Option<Vec<&Frame>> {
        let sample = self.sample_at(t_secs)?;
        Some(self.frames_of(self.working(sample)?))
    }

    /// Every thread's stack at `t_secs`: the main thread's first.
    #[must_use]
    pub fn threads_at(&self, t_secs: f64) -> Vec<Vec<&Frame>> {
        self.sample_at(t_secs)
            .map(|s| {
                s.stack
                    .iter()
                    .chain(&s.threads)
                    .map(|&stack| self.frames_of(stack))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Distinct frames a recording keeps; a new one past it is dropped.
pub const MAX_FRAMES: usize = 100_000;
/// Distinct stacks a recording keeps; a new one past it is dropped.
pub const MAX_STACKS: usize = 100_000;
/// Frame and stack ids the probes may define in all (the same frame named
/// by many processes included).
const MAX_IDS: usize = 400_000;
/// Frames of one stack kept (the probe sends at most 50).
const MAX_DEPTH: usize = 256;
/// Probe samples kept in full; past it they are thinned (one in 2, then one
/// in 4 after another half of it, ...), each process's new highs kept.
pub const MAX_SAMPLES: usize = 400_000;

/// A frame or stack past the caps: counted by the recorder, not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Collects what the probes send: frames and stacks by each process's own
/// numbers, kept once each, numbered in one table for the whole recording.
/// Bounded: [`MAX_FRAMES`], [`MAX_STACKS`], [`MAX_SAMPLES`].
#[derive(Debug, Default, Clone)]
pub struct Stacks {
    trace: TraceStacks,
    frame_at: HashMap<Frame, u32>,
    /// (pid, the probe's frame id) -> position in `frames`.
    frame_ids: HashMap<(u32, u64), u32>,
    table_at: HashMap<Vec<u32>, u32>,
    /// (pid, the probe's stack id) -> position in `stacks`.
    stack_ids: HashMap<(u32, u64), u32>,
    /// Each process's highest MLX active so far (a new high is never
    /// thinned out).
    highs: HashMap<u32, u64>,
    /// Samples offered since the cap was reached.
    past_cap: u64,
}

/// `value`'s place in a table of `len` entries (at most `max`) that
/// `at` indexes, and whether it is new there; the probe's `(pid, id)`
/// named for it in `ids` (of `all_ids` names in all, at most [`MAX_IDS`]).
/// [`Full`] when a new value or a new name passes its cap.
fn intern<K: std::hash::Hash + Eq + Clone>(
    (len, max): (usize, usize),
    at: &mut HashMap<K, u32>,
    (ids, all_ids): (&mut HashMap<(u32, u64), u32>, usize),
    name: (u32, u64),
    value: &K,
) -> Result<(u32, bool), Full> {
    if (len >= max && !at.contains_key(value)) || (all_ids >= MAX_IDS && !ids.contains_key(&name)) {
        return Err(Full);
    }
    let next = position(len);
    let place = *at.entry(value.clone()).or_insert(next);
    ids.insert(name, place);
    Ok((place, place == next))
}

pub(crate) fn position(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl Stacks {
    /// A `frame` line: frame `id` of process `pid`; the update when the
    /// frame is new to the recording.
    ///
    /// # Errors
    /// [`Full`] past the caps.
    pub fn define_frame(
        &mut self,
        pid: u32,
        id: u64,
        frame: Frame,
    ) -> Result<Option<StackUpdate>, Full> {
        let ids = self.ids();
        let table = (self.trace.frames.len(), MAX_FRAMES);
        let (at, new) = intern(
            table,
            &mut self.frame_at,
            (&mut self.frame_ids, ids),
            (pid, id),
            &frame,
        )?;
        Ok(new.then(|| self.applied(StackUpdate::Frame(at, frame))))
    }

    fn ids(&self) -> usize {
        self.frame_ids.len() + self.stack_ids.len()
    }

    /// A `stack-def` line: stack `id` of `pid` is `frames` (the probe's
    /// frame ids, innermost first; frames never defined are left out); the
    /// update when the stack is new to the recording.
    ///
    /// # Errors
    /// [`Full`] past the caps.
    pub fn define_stack(
        &mut self,
        pid: u32,
        id: u64,
        frames: &[u64],
    ) -> Result<Option<StackUpdate>, Full> {
        let stack: Vec<u32> = frames
            .iter()
            .filter_map(|f| self.frame_ids.get(&(pid, *f)).copied())
            .take(MAX_DEPTH)
            .collect();
        let ids = self.ids();
        let table = (self.trace.stacks.len(), MAX_STACKS);
        let (at, new) = intern(
            table,
            &mut self.table_at,
            (&mut self.stack_ids, ids),
            (pid, id),
            &stack,
        )?;
        Ok(new.then(|| self.applied(StackUpdate::Stack(at, stack))))
    }

    /// A sample of process `pid`: its main thread's stack (the probe's id;
    /// negative or unknown: none), its other threads', and its MLX active
    /// bytes when it uses MLX; `None` when it is thinned out (past
    /// [`MAX_SAMPLES`]).
    pub fn sample(
        &mut self,
        t: f64,
        pid: u32,
        stack: Option<i64>,
        threads: &[i64],
        active: Option<u64>,
    ) -> Option<StackUpdate> {
        if !self.keep_sample(pid, active) {
            return None;
        }
        let known = |id: i64| {
            u64::try_from(id)
                .ok()
                .and_then(|id| self.stack_ids.get(&(pid, id)).copied())
        };
        let sample = StackSample {
            t,
            pid,
            stack: stack.and_then(known),
            threads: threads
                .iter()
                .take(MAX_DEPTH)
                .filter_map(|&id| known(id))
                .collect(),
            active,
        };
        Some(self.applied(StackUpdate::Sample(sample)))
    }

    /// Whether a sample is kept: all up to [`MAX_SAMPLES`]; past it one in
    /// 2, then one in 4 after another half of the cap, and so on, with
    /// every new high of a process's MLX active kept up to twice the cap.
    fn keep_sample(&mut self, pid: u32, active: Option<u64>) -> bool {
        let high = active.is_some_and(|a| {
            let was = self.highs.entry(pid).or_insert(0);
            let high = a > *was;
            *was = (*was).max(a);
            high
        });
        let kept = self.trace.samples.len();
        if kept < MAX_SAMPLES || (high && kept < 2 * MAX_SAMPLES) {
            return true;
        }
        self.past_cap += 1;
        let halves = (kept - MAX_SAMPLES) / (MAX_SAMPLES / 2);
        let stride = 2_u64 << halves.min(40);
        self.past_cap.is_multiple_of(stride)
    }

    /// A held-by walk of a probe.
    pub fn held(&mut self, walk: super::census::Census) -> StackUpdate {
        self.applied(StackUpdate::Held(walk))
    }

    /// A process said its rank.
    pub fn rank(&mut self, pid: u32, rank: u32) -> StackUpdate {
        self.applied(StackUpdate::Rank { pid, rank })
    }

    fn applied(&mut self, update: StackUpdate) -> StackUpdate {
        self.trace.apply(update.clone());
        update
    }

    /// Everything the probes sent, as a trace keeps it (none when no
    /// probe sampled).
    #[must_use]
    pub fn to_trace(&self) -> Option<TraceStacks> {
        (!self.trace.samples.is_empty()).then(|| self.trace.clone())
    }
}
