//! Source lines from inside a recorded job: the frames and stacks its
//! probe sends (each once, then by number), and what memory grew while each
//! line was executing.
//!
//! Attribution: every probe sample names the stack of the job's main thread
//! at that moment. The growth of MLX active memory since that process's last
//! sample goes to that stack, and so does the growth of the tree's RSS since
//! the recorder's last sample (to the stack the job's process last
//! reported). A stack's line is its innermost frame in the job's own code;
//! frames inside MLX, mlx-lm, the standard library and installed packages
//! are kept in the stack but folded when a line is named.
//!
//! Two figures per line: what grew while it executed (every allocation it
//! caused, freed or not), and what of that was still held at the peak. The
//! second is a ledger: growth is pushed with its stack, and a drop takes
//! back the latest growth first (a shard's tensors, freed before the next
//! shard's are loaded, leave nothing in it); what is left at the peak is
//! what each line was holding when memory was highest.

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

/// The Python stacks of a recorded job as a trace keeps them: each frame
/// once, each stack once (frame positions, innermost first), and the stack
/// each probe sample saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceStacks {
    /// Every distinct frame.
    pub frames: Vec<Frame>,
    /// Every distinct stack: positions in `frames`, innermost first.
    pub stacks: Vec<Vec<u32>>,
    /// Each sample: seconds on the trace's clock, position in `stacks`.
    pub samples: Vec<(f64, u32)>,
}

impl TraceStacks {
    /// The stack the last sample at or before `t_secs` saw, innermost
    /// frame first.
    #[must_use]
    pub fn at(&self, t_secs: f64) -> Option<Vec<&Frame>> {
        let i = self.samples.partition_point(|(t, _)| *t <= t_secs);
        let (_, stack) = self.samples.get(i.checked_sub(1)?)?;
        let frames = self.stacks.get(usize::try_from(*stack).ok()?)?;
        Some(
            frames
                .iter()
                .filter_map(|&f| self.frames.get(usize::try_from(f).ok()?))
                .collect(),
        )
    }
}

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

/// Growth by stack, latest last; a drop takes back the latest first. At
/// each new high, what it holds per stack is kept.
#[derive(Debug, Default, Clone)]
struct Ledger {
    entries: Vec<(usize, u64)>,
    last: u64,
    peak: u64,
    at_peak: HashMap<usize, u64>,
    peak_stack: Option<usize>,
    grew: HashMap<usize, u64>,
}

impl Ledger {
    /// The figure is `now`, with `stack` executing.
    fn record(&mut self, stack: usize, now: u64) {
        if now > self.last {
            let grew = now - self.last;
            *self.grew.entry(stack).or_insert(0) += grew;
            match self.entries.last_mut() {
                Some((s, bytes)) if *s == stack => *bytes += grew,
                _ => self.entries.push((stack, grew)),
            }
        } else {
            let mut drop = self.last - now;
            while drop > 0 {
                let Some((_, bytes)) = self.entries.last_mut() else {
                    break;
                };
                let taken = drop.min(*bytes);
                *bytes -= taken;
                drop -= taken;
                if *bytes == 0 {
                    self.entries.pop();
                }
            }
        }
        self.last = now;
        // The first moment of the highest figure (a plateau keeps it).
        if now > self.peak || self.peak_stack.is_none() {
            self.peak = now;
            self.peak_stack = Some(stack);
            self.at_peak.clear();
            for &(s, bytes) in &self.entries {
                *self.at_peak.entry(s).or_insert(0) += bytes;
            }
        }
    }

    /// The figure is `now`, with no stack known: no line is charged.
    fn untracked(&mut self, now: u64) {
        self.last = now;
    }
}

/// The frames and stacks a recording's probes sent, and the growth
/// attributed to each stack.
#[derive(Debug, Default, Clone)]
pub struct Stacks {
    /// Every distinct frame, and where each is.
    frames: Vec<Frame>,
    frame_at: HashMap<Frame, usize>,
    /// (pid, the probe's frame id) -> position in `frames`.
    frame_ids: HashMap<(u32, u64), usize>,
    /// Every distinct stack, innermost frame first (positions in `frames`),
    /// and where each is.
    table: Vec<Vec<usize>>,
    table_at: HashMap<Vec<usize>, usize>,
    /// (pid, the probe's stack id) -> position in `table`.
    stack_ids: HashMap<(u32, u64), usize>,
    /// Each process's last stack.
    current: HashMap<u32, Option<usize>>,
    /// MLX active memory per process, by stack.
    mlx: HashMap<u32, Ledger>,
    /// The tree's RSS, by stack.
    rss: Ledger,
    /// The process that sent the latest stack.
    last_pid: Option<u32>,
    /// Each stack sample: seconds on the recording's clock, stack.
    timeline: Vec<(f64, usize)>,
}

impl Stacks {
    /// A `frame` line: frame `id` of process `pid`.
    pub fn define_frame(&mut self, pid: u32, id: u64, frame: Frame) {
        let next = self.frames.len();
        let at = *self.frame_at.entry(frame.clone()).or_insert(next);
        if at == next {
            self.frames.push(frame);
        }
        self.frame_ids.insert((pid, id), at);
    }

    /// A `stack-def` line: stack `id` of `pid` is `frames` (the probe's frame
    /// ids, innermost first); frames never defined are left out.
    pub fn define_stack(&mut self, pid: u32, id: u64, frames: &[u64]) {
        let stack: Vec<usize> = frames
            .iter()
            .filter_map(|f| self.frame_ids.get(&(pid, *f)).copied())
            .collect();
        let next = self.table.len();
        let at = *self.table_at.entry(stack.clone()).or_insert(next);
        if at == next {
            self.table.push(stack);
        }
        self.stack_ids.insert((pid, id), at);
    }

    /// A sample of process `pid`: its stack now (the probe's id; negative
    /// or unknown: none) and, when the job uses MLX, its active bytes.
    pub fn sample(&mut self, t_secs: f64, pid: u32, stack: Option<i64>, active: Option<u64>) {
        let stack = stack
            .and_then(|id| u64::try_from(id).ok())
            .and_then(|id| self.stack_ids.get(&(pid, id)).copied());
        if let Some(stack) = stack {
            self.timeline.push((t_secs, stack));
        }
        if let Some(now) = active {
            let ledger = self.mlx.entry(pid).or_default();
            match stack {
                Some(stack) => ledger.record(stack, now),
                None => ledger.untracked(now),
            }
        }
        self.current.insert(pid, stack);
        if stack.is_some() {
            self.last_pid = Some(pid);
        }
    }

    /// The recorder sampled the tree's RSS: charged to the stack last
    /// reported (none yet: no line is charged).
    pub fn tree_sample(&mut self, rss: u64) {
        match self
            .last_pid
            .and_then(|pid| self.current.get(&pid).copied().flatten())
        {
            Some(stack) => self.rss.record(stack, rss),
            None => self.rss.untracked(rss),
        }
    }

    /// The stack last reported by any process, innermost frame first.
    #[must_use]
    pub fn last(&self) -> Option<Vec<Frame>> {
        self.current(self.last_pid?)
    }

    /// The stack at the tree's highest sampled RSS, innermost first.
    #[must_use]
    pub fn at_rss_peak(&self) -> Option<Vec<Frame>> {
        self.rss.peak_stack.map(|stack| self.frames_of(stack))
    }

    /// The stack `pid` last reported, innermost frame first.
    #[must_use]
    pub fn current(&self, pid: u32) -> Option<Vec<Frame>> {
        let stack = self.current.get(&pid).copied().flatten()?;
        Some(self.frames_of(stack))
    }

    /// What a finished recording keeps: the stack at the peak (MLX active
    /// with MLX, else RSS), the last stack, the lines, and every sample.
    #[must_use]
    pub fn summary(&self) -> (Vec<Frame>, Vec<Frame>, Vec<LineGrowth>, Option<TraceStacks>) {
        let peak = self.at_mlx_peak().or_else(|| self.at_rss_peak());
        (
            peak.unwrap_or_default(),
            self.last().unwrap_or_default(),
            self.lines(),
            self.to_trace(),
        )
    }

    /// Everything the probes sent, as a trace keeps it.
    #[must_use]
    pub fn to_trace(&self) -> Option<TraceStacks> {
        let to_u32 = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        (!self.timeline.is_empty()).then(|| TraceStacks {
            frames: self.frames.clone(),
            stacks: self
                .table
                .iter()
                .map(|s| s.iter().copied().map(to_u32).collect())
                .collect(),
            samples: self.timeline.iter().map(|&(t, s)| (t, to_u32(s))).collect(),
        })
    }

    /// Whether any probe sent a stack.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The stack at the highest MLX active of any process, innermost first.
    #[must_use]
    pub fn at_mlx_peak(&self) -> Option<Vec<Frame>> {
        let stack = self.mlx_ledger()?.peak_stack?;
        Some(self.frames_of(stack))
    }

    /// Process `pid`'s highest MLX active and its stack then.
    #[must_use]
    pub fn peak_of(&self, pid: u32) -> Option<(u64, Vec<Frame>)> {
        let ledger = self.mlx.get(&pid)?;
        Some((ledger.peak, self.frames_of(ledger.peak_stack?)))
    }

    /// The ledger of the process whose MLX active went highest.
    fn mlx_ledger(&self) -> Option<&Ledger> {
        self.mlx
            .values()
            .filter(|l| l.peak_stack.is_some())
            .max_by_key(|l| l.peak)
    }

    fn frames_of(&self, stack: usize) -> Vec<Frame> {
        self.table
            .get(stack)
            .map(|s| s.iter().map(|&f| self.frames[f].clone()).collect())
            .unwrap_or_default()
    }

    /// The innermost frame of `stack` in the job's own code (the innermost
    /// of all when every frame is a library's).
    fn line_of(&self, stack: usize) -> Option<usize> {
        let frames = self.table.get(stack)?;
        frames
            .iter()
            .copied()
            .find(|&f| !self.frames[f].is_library())
            .or_else(|| frames.first().copied())
    }

    /// The job's lines by what they held at the peak, most first (MLX
    /// active when the job uses MLX, else RSS), then by all they grew.
    #[must_use]
    pub fn lines(&self) -> Vec<LineGrowth> {
        let by_line = |growth: &HashMap<usize, u64>| {
            let mut lines: HashMap<usize, u64> = HashMap::new();
            for (&stack, &bytes) in growth {
                if let Some(line) = self.line_of(stack) {
                    *lines.entry(line).or_insert(0) += bytes;
                }
            }
            lines
        };
        let main = self.mlx_ledger().unwrap_or(&self.rss);
        let held = by_line(&main.at_peak);
        let grew = by_line(&main.grew);
        let rss = by_line(&self.rss.grew);
        let total: u64 = held.values().sum();
        let mut lines: Vec<LineGrowth> = grew
            .iter()
            .map(|(&line, &grew_bytes)| {
                let held_at_peak_bytes = held.get(&line).copied().unwrap_or(0);
                LineGrowth {
                    frame: self.frames[line].clone(),
                    held_at_peak_bytes,
                    share: if total == 0 {
                        0.0
                    } else {
                        held_at_peak_bytes as f64 / total as f64
                    },
                    grew_bytes,
                    rss_grew_bytes: rss.get(&line).copied().unwrap_or(0),
                }
            })
            .collect();
        lines.sort_by(|a, b| {
            (b.held_at_peak_bytes, b.grew_bytes)
                .cmp(&(a.held_at_peak_bytes, a.grew_bytes))
                .then_with(|| a.frame.label().cmp(&b.frame.label()))
        });
        lines
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

    fn frame(file: &str, line: u32, function: &str) -> Frame {
        Frame {
            file: file.into(),
            line,
            function: function.into(),
            text: String::new(),
        }
    }

    #[test]
    fn growth_goes_to_the_innermost_line_of_the_jobs_own_code() {
        let mut s = Stacks::default();
        s.define_frame(
            7,
            0,
            frame("/venv/lib/python3.11/site-packages/mlx/x.py", 3, "load"),
        );
        s.define_frame(7, 1, frame("/work/fold.py", 26, "main"));
        s.define_frame(7, 2, frame("/work/fold.py", 30, "main"));
        s.define_stack(7, 0, &[0, 1]);
        s.define_stack(7, 1, &[2]);
        s.sample(0.0, 7, Some(0), Some(100));
        s.sample(0.0, 7, Some(0), Some(300));
        s.sample(0.0, 7, Some(1), Some(250)); // 50 freed: taken from line 26's
        s.sample(0.0, 7, Some(1), Some(260));
        let lines = s.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].frame.line, 26, "{lines:?}");
        assert_eq!(lines[0].grew_bytes, 300);
        assert_eq!(lines[0].held_at_peak_bytes, 300, "the peak was at 300");
        assert_eq!(lines[1].held_at_peak_bytes, 0);
        assert_eq!(lines[1].grew_bytes, 10);
        assert!((lines[0].share - 1.0).abs() < 1e-12);
        let peak = s.at_mlx_peak().expect("a peak");
        assert_eq!(peak[1].line, 26);
        assert_eq!(
            describe(&peak),
            "fold.py:26 in main, inside 1 library frame"
        );
        s.tree_sample(4096);
        assert_eq!(
            s.lines()[1].rss_grew_bytes,
            4096,
            "the current stack's line"
        );
        assert_eq!(s.at_rss_peak().expect("rss peak")[0].line, 30);
        assert_eq!(s.last().expect("last")[0].line, 30);
    }

    #[test]
    fn a_trace_keeps_the_stack_of_every_sample() {
        let mut s = Stacks::default();
        s.define_frame(1, 0, frame("/work/a.py", 1, "f"));
        s.define_frame(1, 1, frame("/work/a.py", 2, "g"));
        s.define_stack(1, 0, &[0]);
        s.define_stack(1, 1, &[1, 0]);
        s.sample(0.5, 1, Some(0), None);
        s.sample(1.0, 1, Some(1), None);
        let trace = s.to_trace().expect("stacks");
        let json = serde_json::to_string(&trace).expect("json");
        let back: TraceStacks = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, trace);
        assert!(trace.at(0.1).is_none(), "before the first sample");
        assert_eq!(trace.at(0.7).expect("a stack")[0].line, 1);
        let later = trace.at(5.0).expect("a stack");
        assert_eq!((later[0].line, later[1].line), (2, 1));
    }

    #[test]
    fn a_job_that_releases_holds_one_step_at_its_peak() {
        let mut s = Stacks::default();
        s.define_frame(1, 0, frame("/work/fold.py", 10, "load"));
        s.define_frame(1, 1, frame("/work/fold.py", 20, "free"));
        s.define_stack(1, 0, &[0]);
        s.define_stack(1, 1, &[1]);
        for _ in 0..4 {
            s.sample(0.0, 1, Some(0), Some(8));
            s.sample(0.0, 1, Some(1), Some(0));
        }
        let lines = s.lines();
        assert_eq!(lines[0].frame.line, 10);
        assert_eq!(lines[0].grew_bytes, 32, "every shard loaded");
        assert_eq!(lines[0].held_at_peak_bytes, 8, "one shard held at a time");
    }

    #[test]
    fn unknown_ids_and_other_processes_are_kept_apart() {
        let mut s = Stacks::default();
        s.define_frame(1, 0, frame("/a.py", 1, "f"));
        s.define_stack(1, 0, &[0, 99]);
        s.sample(0.0, 2, Some(0), Some(50)); // pid 2 never defined stack 0
        s.sample(0.0, 1, Some(-1), Some(50));
        assert!(s.lines().is_empty());
        s.sample(0.0, 1, Some(0), Some(80));
        assert_eq!(s.lines()[0].grew_bytes, 30, "from the last figure, 50");
        assert_eq!(s.lines()[0].held_at_peak_bytes, 30);
    }
}
