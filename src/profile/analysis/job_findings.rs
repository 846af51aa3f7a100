//! Findings of a recorded job: each a sentence a person can act on, backed
//! by figures of the recording (the moment it points at is on its clock).

use super::findings::{Finding, FindingKind};
use crate::memory::MachineMemory;
use crate::units::human_bytes;

use super::recording::{JobExit, Recording, signal_name};

/// Below this, memory figures are not worth a finding.
const SMALL_BYTES: u64 = 64 << 20;

/// The findings of `recording`, most important first.
#[must_use]
pub fn record_findings(recording: &Recording) -> Vec<Finding> {
    let mut found = Vec::new();
    job_failed(recording, &mut found);
    held_by(recording, &mut found);
    accumulated(recording, &mut found);
    files_held_open(recording, &mut found);
    cache_at_peak(recording, &mut found);
    host_copies(recording, &mut found);
    mlx_gap(recording, &mut found);
    near_machine_memory(recording, MachineMemory::read(), &mut found);
    found
}

/// Who held the memory at the peak (the probe's walk), with the line that
/// allocated it when that is another place.
fn held_by(r: &Recording, found: &mut Vec<Finding>) {
    let Some(walk) = &r.held_by else { return };
    let Some(top) = walk.roots.first() else {
        return;
    };
    if top.bytes < SMALL_BYTES / 16 {
        return;
    }
    let allocated = r.lines.first().map(|l| l.frame.label());
    let Some(text) = super::held::sentence(walk, allocated.as_deref(), r.peak_mlx_active_bytes)
    else {
        return;
    };
    found.push(FindingKind::HeldBy.said(text, Some(walk.t_secs)));
}

fn job_failed(r: &Recording, found: &mut Vec<Finding>) {
    let Some(exit) = r.exit else { return };
    let end = r.last_job_sample();
    let at = end.map_or(r.elapsed_secs, |s| s.at);
    // How old the last sample was when the job ended: what was seen last.
    let age = (r.elapsed_secs - at).max(0.0);
    let rss = end.map_or(0, |s| s.process.rss_bytes);
    let loaded = r.files_used();
    let of = r
        .checkpoint
        .as_ref()
        .map_or(String::new(), |c| format!(" of {}", c.shards));
    let last = |kind: crate::memory::MarkKind| r.events.iter().rev().find(|e| e.kind == kind);
    let last_mark = last(crate::memory::MarkKind::JobMark).map_or(String::new(), |e| {
        format!("; its last mark: \"{}\"", e.target)
    });
    // The line executing at the last sample, when the probe sent stacks.
    let line = if r.last_stack.is_empty() {
        String::new()
    } else {
        format!(", while at {}", super::stacks::describe(&r.last_stack))
    };
    // An exception that ended the job, as its probe saw it.
    let raised = last(crate::memory::MarkKind::JobException).map_or(String::new(), |e| {
        let memory = if is_memory_error(&e.target) {
            " (an allocation failed: out of memory)"
        } else {
            ""
        };
        format!(" It raised {}{memory} at {}.", e.target, e.detail)
    });
    // A shell's 128+N is its command's signal N.
    let (exit, shell) = match r.ending_signal() {
        Some((n, true)) => (
            JobExit::Signal(n),
            format!(
                " (Its shell exited with status {}, which a shell reports for a command ended by signal {n}.)",
                n + 128
            ),
        ),
        _ => (exit, String::new()),
    };
    let text = match exit {
        JobExit::Code(0) => return,
        JobExit::Code(code) => format!(
            "The job exited with status {code} at {at:.1} s{line}, with RSS {} and {loaded}{of} shard files used{last_mark}.",
            human_bytes(rss)
        ),
        JobExit::Signal(2) => format!(
            "The job was stopped by SIGINT (Ctrl+C) at {at:.1} s{line}, with RSS {} and {loaded}{of} shard files used{last_mark}.",
            human_bytes(rss)
        ),
        JobExit::Signal(9) => match &r.memory_kill {
            Some(kill) => format!(
                "The kernel killed the job for memory at {at:.1} s (the last sample, {age:.2} s before it ended): it reached {}{line}, with RSS {} (peak {}), having loaded {}{last_mark}.",
                kill.limit_bytes.map_or_else(
                    || format!("the memory of cgroup {}", kill.cgroup),
                    |limit| format!(
                        "{}, the limit of cgroup {}",
                        human_bytes(limit),
                        kill.cgroup
                    )
                ),
                human_bytes(rss),
                human_bytes(r.peak_rss_bytes),
                loaded_files(r)
            ),
            None => format!(
                "The job was killed by SIGKILL at {at:.1} s (the last sample, {age:.2} s before it ended){line}, with RSS {} (peak {}): if nothing else sent it, the kernel's OOM killer did (`dmesg` says); it had loaded {}{last_mark}.",
                human_bytes(rss),
                human_bytes(r.peak_rss_bytes),
                loaded_files(r)
            ),
        },
        JobExit::Signal(signal) => format!(
            "The job was ended by signal {signal} ({}) at {at:.1} s (the last sample, {age:.2} s before it ended){line}, with RSS {}, having loaded {}{last_mark}.",
            signal_name(signal),
            human_bytes(rss),
            loaded_files(r)
        ),
    };
    let text = text + &shell + &raised;
    // Under `ulimit -v` an allocation past the limit fails: MLX then
    // throws or the process dies of a signal. Say the limit.
    let text = match r.address_space_limit {
        Some(limit) => format!(
            "{text} It ran under an address-space limit (ulimit -v) of {}: an allocation past it fails, which MLX reports as an error or a crash.",
            human_bytes(limit)
        ),
        None => text,
    };
    found.push(FindingKind::JobFailed.said(text, Some(at)));
}

/// Whether an exception's "Type: message" says memory ran out: Python's
/// `MemoryError` (numpy's "Unable to allocate"), MLX's "[malloc] Unable to
/// allocate" and "`[metal::malloc]`", CUDA's "out of memory".
fn is_memory_error(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.starts_with("memoryerror")
        || t.contains("unable to allocate")
        || t.contains("out of memory")
        || t.contains("malloc]")
}

/// The shard files the job used, by name: "model-00001.safetensors,
/// model-00002.safetensors (2 files)", the middle left out past six.
fn loaded_files(r: &Recording) -> String {
    let names: Vec<&str> = r
        .files_loaded()
        .into_iter()
        .map(|f| f.rsplit('/').next().unwrap_or(f))
        .collect();
    // With the probe's loads: "released none" when memory never fell back
    // to where it was at any load (the clear case of a job that kept them
    // all). Which of several was released cannot be told from MLX's total
    // when a job frees one file's arrays after loading the next, so a
    // partial claim is not made here (the JSON has the estimate per file).
    let released = if !r.files_loaded.is_empty() && r.files_loaded.iter().all(|f| f.held) {
        " and released none".to_owned()
    } else {
        String::new()
    };
    let list = match names.len() {
        0 => "no shard file".to_owned(),
        1 => names[0].to_owned(),
        n if n <= 6 => format!("{} ({n} files)", names.join(", ")),
        n => format!(
            "{}, ..., {} ({n} files)",
            names[..3].join(", "),
            names[n - 2..].join(", ")
        ),
    };
    list + &released
}

/// The job's own footprint at its peak: MLX active when the probe said, else RSS.
fn footprint(r: &Recording) -> (u64, &'static str) {
    match r.peak_mlx_active_bytes {
        Some(active) => (active, "MLX active"),
        None => (r.peak_rss_bytes, "RSS"),
    }
}

/// The line that grew the job's memory most, as a sentence to append.
fn top_line(r: &Recording) -> String {
    r.lines.first().map_or(String::new(), |l| {
        let code = if l.frame.text.is_empty() {
            String::new()
        } else {
            format!(" ({})", l.frame.text)
        };
        format!(
            " At the peak, {} ({:.0} %) had grown while {}{code} executed.",
            human_bytes(l.held_at_peak_bytes),
            l.share * 100.0,
            l.frame.label()
        )
    })
}

fn accumulated(r: &Recording, found: &mut Vec<Finding>) {
    let Some(c) = &r.checkpoint else { return };
    let (peak, what) = footprint(r);
    if c.shards < 2 || c.total_bytes < SMALL_BYTES / 4 || peak < SMALL_BYTES / 4 {
        return;
    }
    let at = Some(peak_mlx_secs(r).unwrap_or(r.peak_rss_secs));
    let ratio = peak as f64 / c.total_bytes as f64;
    if ratio >= 1.8 {
        found.push(FindingKind::SourcesAndOutputsKept.said(
            format!(
                "The job held {} ({what}) at its peak, {ratio:.1} times the {} checkpoint: sources and outputs were both kept. Write each output and drop its sources as you go; a shard at a time would peak near {}.{}",
                human_bytes(peak),
                human_bytes(c.total_bytes),
                human_bytes(c.expected.release_shard),
                top_line(r)
            ),
            at,
        ));
    } else if ratio >= 0.75 && peak as f64 > 1.5 * c.expected.release_shard as f64 {
        found.push(FindingKind::JobAccumulated.said(
            format!(
                "The job held {} ({what}) at its peak, {:.0} % of the {} checkpoint: the tensors of every shard were kept. Releasing each shard's arrays when done with it (and mx.clear_cache()) would peak near {}, the largest shard's share.{}",
                human_bytes(peak),
                ratio * 100.0,
                human_bytes(c.total_bytes),
                human_bytes(c.expected.release_shard),
                top_line(r)
            ),
            at,
        ));
    }
}

/// When MLX active peaked, if the probe reported.
fn peak_mlx_secs(r: &Recording) -> Option<f64> {
    r.samples
        .iter()
        .filter_map(|s| s.mlx.map(|m| (s.at, m.active_bytes)))
        .max_by_key(|(_, active)| *active)
        .map(|(t, _)| t)
}

fn files_held_open(r: &Recording, found: &mut Vec<Finding>) {
    let at_peak = &r.files_open_at_peak;
    if at_peak.len() < 3 || r.files_seen.len() < 3 {
        return;
    }
    let bytes: u64 = at_peak.iter().map(|f| f.bytes).sum();
    found.push(FindingKind::FilesHeldOpen.said(
        format!(
            "{} of the {} shard files the job opened were still open at its peak ({}): arrays loaded from shards it had moved past keep those files alive. Drop the arrays of a shard (del, or let them go out of scope) before loading the next.",
            at_peak.len(),
            r.files_seen.len(),
            human_bytes(bytes)
        ),
        Some(r.peak_rss_secs),
    ));
}

fn cache_at_peak(r: &Recording, found: &mut Vec<Finding>) {
    // The moment MLX held the most, cache included.
    let Some((t, m)) = r
        .samples
        .iter()
        .filter_map(|s| s.mlx.map(|m| (s.at, m)))
        .max_by_key(|(_, m)| m.active_bytes.saturating_add(m.cache_bytes))
    else {
        return;
    };
    let total = m.active_bytes.saturating_add(m.cache_bytes);
    if m.cache_bytes < SMALL_BYTES || m.cache_bytes * 5 < total {
        return;
    }
    found.push(FindingKind::CacheAtPeak.said(
        format!(
            "{} of MLX's {} at its peak was its buffer cache (freed arrays kept for reuse): call mx.clear_cache() after releasing a shard, or cap it with mx.set_cache_limit().",
            human_bytes(m.cache_bytes),
            human_bytes(total)
        ),
        Some(t),
    ));
}

/// The longest stretch, between the probe's first and last figures, of
/// samples without MLX figures (theirs were older than ten samples): said,
/// so that nothing is read into the flat or missing stretch of the series.
fn mlx_gap(r: &Recording, found: &mut Vec<Finding>) {
    let with = |s: &&crate::memory::Sample| s.mlx.is_some();
    let (Some(first), Some(last)) = (
        r.samples.iter().position(|s| with(&s)),
        r.samples.iter().rposition(|s| with(&s)),
    ) else {
        return;
    };
    let Some(inner) = r.samples.get(first..=last) else {
        return;
    };
    let mut longest: Option<(f64, f64)> = None;
    let mut start: Option<f64> = None;
    let mut previous = 0.0;
    for s in inner {
        match (s.mlx.is_some(), start) {
            (false, None) => start = Some(previous),
            (true, Some(from)) => {
                if longest.is_none_or(|(a, b)| s.at - from > b - a) {
                    longest = Some((from, s.at));
                }
                start = None;
            }
            _ => {}
        }
        previous = s.at;
    }
    let Some((from, to)) = longest else { return };
    found.push(FindingKind::MlxGap.said(
        format!(
            "MLX's figures are missing from {from:.1} s to {to:.1} s: the probe inside the job sent none (its thread got no time: a loaded machine, or Python's lock held through a long call). The series has a gap there; what RSS held then is not attributed."
        ),
        Some(from),
    ));
}

fn host_copies(r: &Recording, found: &mut Vec<Finding>) {
    // At the sampled RSS peak, what RSS holds beyond MLX's own memory.
    let Some(s) = r
        .samples
        .iter()
        .filter(|s| s.mlx.is_some())
        .max_by_key(|s| s.process.rss_bytes)
    else {
        return;
    };
    let m = s.mlx.unwrap_or_default();
    let beyond = s
        .process
        .rss_bytes
        .saturating_sub(m.active_bytes.saturating_add(m.cache_bytes));
    if beyond < (512 << 20).max(s.process.rss_bytes / 2) {
        return;
    }
    found.push(FindingKind::HostCopies.said(
        format!(
            "At {:.1} s RSS was {}, {} more than MLX's active and cache memory: host copies (numpy, torch, Python lists) or mapped files held it, not MLX.",
            s.at,
            human_bytes(s.process.rss_bytes),
            human_bytes(beyond)
        ),
        Some(s.at),
    ));
}

fn near_machine_memory(r: &Recording, machine: MachineMemory, found: &mut Vec<Finding>) {
    if machine.total_bytes == 0 || r.peak_rss_bytes * 10 < machine.total_bytes * 9 {
        return;
    }
    found.push(FindingKind::NearMachineMemory.said(
        format!(
            "The job's peak RSS, {}, was {:.0} % of this machine's {}: one more copy and it is out of memory.",
            human_bytes(r.peak_rss_bytes),
            100.0 * r.peak_rss_bytes as f64 / machine.total_bytes as f64,
            human_bytes(machine.total_bytes)
        ),
        Some(r.peak_rss_secs),
    ));
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::recording::{CheckpointFacts, OpenFile};
    use super::*;
    use crate::memory::{ExpectedPeaks, MlxFigures, ProcessFigures, Sample};

    const MIB: u64 = 1 << 20;

    fn sample(t_secs: f64, rss_bytes: u64, mlx: Option<(u64, u64)>) -> Sample {
        Sample {
            at: t_secs,
            process: ProcessFigures {
                rss_bytes,
                anon_bytes: rss_bytes,
                peak_rss_bytes: rss_bytes,
                processes: 1,
                ..ProcessFigures::default()
            },
            mlx: mlx.map(|(active, cache)| MlxFigures {
                active_bytes: active,
                cache_bytes: cache,
                peak_bytes: active,
            }),
            gpu: None,
        }
    }

    /// A finished job over a 4-shard, 1 GiB checkpoint.
    fn recording(samples: Vec<Sample>) -> Recording {
        let peak = samples
            .iter()
            .map(|s| s.process.rss_bytes)
            .max()
            .unwrap_or(0);
        let peak_mlx = samples
            .iter()
            .filter_map(|s| s.mlx.map(|m| m.active_bytes))
            .max();
        Recording {
            command: "job".into(),
            pid: 1,
            attached: false,
            exit: Some(JobExit::Code(0)),
            elapsed_secs: 10.0,
            start_secs: 0.0,
            samples,
            events: Vec::new(),
            probe: None,
            files_seen: Vec::new(),
            files_open_at_peak: Vec::new(),
            peak_rss_bytes: peak,
            rss_is_pss: false,
            peak_rss_secs: 5.0,
            peak_mlx_active_bytes: peak_mlx,
            peak_gpu_bytes: None,
            peak_gpu_device_used_bytes: None,
            gpu_unavailable: None,
            checkpoint: Some(CheckpointFacts {
                path: PathBuf::from("/models/m"),
                total_bytes: 1024 * MIB,
                largest_shard_bytes: 256 * MIB,
                shards: 4,
                expected: ExpectedPeaks {
                    retain: 1024 * MIB,
                    release_tensor: 1024 * MIB,
                    release_shard: 256 * MIB,
                },
            }),
            checkpoint_error: None,
            findings: Vec::new(),
            peak_stack: Vec::new(),
            last_stack: Vec::new(),
            lines: Vec::new(),
            phases: Vec::new(),
            files_loaded: Vec::new(),
            by_stack: Vec::new(),
            stacks: None,
            cut_short: false,
            memory_kill: None,
            address_space_limit: None,
            output: Vec::new(),
            ledger: None,
            ranks: Vec::new(),
            held_by: None,
            held_last: None,
            origin: None,
        }
    }

    fn kinds(r: &Recording) -> Vec<FindingKind> {
        record_findings(r).into_iter().map(|f| f.code).collect()
    }

    #[test]
    fn accumulation_and_twice_the_model_are_told_apart() {
        let whole = recording(vec![sample(5.0, 1200 * MIB, Some((1000 * MIB, 0)))]);
        assert_eq!(kinds(&whole), [FindingKind::JobAccumulated]);
        let twice = recording(vec![sample(5.0, 2200 * MIB, Some((2000 * MIB, 0)))]);
        assert_eq!(kinds(&twice), [FindingKind::SourcesAndOutputsKept]);
        let streaming = recording(vec![sample(5.0, 400 * MIB, Some((300 * MIB, 0)))]);
        assert!(kinds(&streaming).is_empty());
    }

    #[test]
    fn the_cache_at_the_peak_and_host_copies_are_named() {
        let cached = recording(vec![sample(5.0, 500 * MIB, Some((300 * MIB, 200 * MIB)))]);
        assert_eq!(kinds(&cached), [FindingKind::CacheAtPeak]);
        let copies = recording(vec![sample(5.0, 2000 * MIB, Some((300 * MIB, 0)))]);
        assert_eq!(kinds(&copies), [FindingKind::HostCopies]);
    }

    #[test]
    fn a_gap_in_the_mlx_series_is_said_and_not_taken_for_host_memory() {
        // The probe's figures stopped from 1 s to 4 s while RSS grew: the
        // stretch is a gap (no figures), said; nothing there is called
        // host memory, and what the fresh samples show stays true.
        let samples = vec![
            sample(0.0, 300 * MIB, Some((200 * MIB, 0))),
            sample(1.0, 400 * MIB, Some((300 * MIB, 0))),
            sample(2.0, 1500 * MIB, None),
            sample(3.0, 1900 * MIB, None),
            sample(4.0, 450 * MIB, Some((350 * MIB, 0))),
        ];
        let found = kinds(&recording(samples));
        assert!(found.contains(&FindingKind::MlxGap), "{found:?}");
        assert!(!found.contains(&FindingKind::HostCopies), "{found:?}");
        let text = record_findings(&recording(vec![
            sample(0.0, 300 * MIB, Some((200 * MIB, 0))),
            sample(1.0, 400 * MIB, Some((300 * MIB, 0))),
            sample(2.5, 900 * MIB, None),
            sample(4.0, 450 * MIB, Some((350 * MIB, 0))),
        ]))
        .into_iter()
        .find(|f| f.code == FindingKind::MlxGap)
        .expect("the gap")
        .message;
        assert!(
            text.starts_with("MLX's figures are missing from 1.0 s to 4.0 s"),
            "{text}"
        );
        // No gap: no such finding (figures only before the probe's first
        // line are not a gap).
        let clean = kinds(&recording(vec![
            sample(0.0, 100 * MIB, None),
            sample(1.0, 400 * MIB, Some((300 * MIB, 0))),
        ]));
        assert!(!clean.contains(&FindingKind::MlxGap), "{clean:?}");
    }

    #[test]
    fn files_held_open_at_the_peak_are_named() {
        let mut r = recording(vec![sample(5.0, 400 * MIB, None)]);
        let file = |n: u32| OpenFile {
            path: PathBuf::from(format!("/models/m/model-{n}.safetensors")),
            bytes: 256 * MIB,
        };
        r.files_seen = (1..=4).map(file).collect();
        r.files_open_at_peak = (1..=3).map(file).collect();
        let found = record_findings(&r);
        assert_eq!(found[0].code, FindingKind::FilesHeldOpen);
        assert!(
            found[0].message.starts_with("3 of the 4 shard files"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn a_failed_job_is_an_error_with_its_status() {
        let mut r = recording(vec![sample(2.0, 300 * MIB, None)]);
        r.exit = Some(JobExit::Code(3));
        let found = record_findings(&r);
        assert_eq!(found[0].code, FindingKind::JobFailed);
        assert_eq!(found[0].code.severity(), crate::finding::Severity::Error);
        assert!(
            found[0].message.contains("status 3 at 2.0 s"),
            "{}",
            found[0].message
        );
        r.exit = Some(JobExit::Signal(9));
        assert!(record_findings(&r)[0].message.contains("OOM killer"));
    }

    #[test]
    fn near_the_machine_memory() {
        let r = recording(vec![sample(5.0, 95 * MIB, None)]);
        let machine = MachineMemory {
            total_bytes: 100 * MIB,
            available_bytes: 5 * MIB,
        };
        let mut found = Vec::new();
        near_machine_memory(&r, machine, &mut found);
        assert_eq!(found[0].code, FindingKind::NearMachineMemory);
        let mut none = Vec::new();
        near_machine_memory(
            &recording(vec![sample(5.0, 50 * MIB, None)]),
            machine,
            &mut none,
        );
        assert!(none.is_empty());
    }
}
