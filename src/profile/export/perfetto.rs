//! Chrome's Trace Event JSON, as Perfetto and `chrome://tracing` open it:
//! `{"traceEvents": [...], "displayTimeUnit": "ms"}`, one process (`pid`)
//! a lane named by a metadata event; counters (`ph: "C"`) for RSS, MLX
//! active and cache, the GPU, and each shard's residency; instant events
//! (`ph: "i"`) for every mark, the peak, a kill for memory and a journal
//! cut short; complete events (`ph: "X"`) for the probe's held-by walks
//! and, for a walk, each shard and each tensor it materialized (a tensor's
//! span runs from the walk's previous event to its step: the walk does
//! nothing else between them). Times in microseconds on the export's clock.

use std::io::Write;

use serde::Serialize;
use serde_json::{Value, json};

use super::{ExportError, Lane, LaneKind, one_line};
use crate::memory::MarkKind;

/// The memory series: thread 0. The probe's walks: thread 1. A walk's
/// shards and tensors: thread 2.
const MEMORY_TID: u32 = 0;
const PROBE_TID: u32 = 1;
const WALK_TID: u32 = 2;

#[derive(Serialize)]
struct Event<'a> {
    name: String,
    ph: &'static str,
    pid: usize,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    /// An instant's scope: `p`, the whole process's track.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    args: Value,
}

/// Streams events into the `traceEvents` list.
struct Events<'o> {
    out: &'o mut dyn Write,
    first: bool,
}

impl Events<'_> {
    fn push(&mut self, event: &Event<'_>) -> Result<(), ExportError> {
        self.out
            .write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut *self.out, event).map_err(std::io::Error::from)?;
        Ok(())
    }
}

/// Seconds as the format's microseconds (to the nanosecond).
fn micros(secs: f64) -> f64 {
    (secs * 1e6 * 1000.0).round() / 1000.0
}

/// Writes the lanes as one Trace Event JSON file.
///
/// # Errors
/// [`ExportError::Write`].
pub fn write_perfetto(lanes: &[Lane], out: &mut dyn Write) -> Result<(), ExportError> {
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(
        &mut *out,
        &json!({ "exporter": format!("weightscope {}", env!("CARGO_PKG_VERSION")) }),
    )
    .map_err(std::io::Error::from)?;
    out.write_all(b",\"traceEvents\":[")?;
    let mut events = Events { out, first: true };
    for (i, lane) in lanes.iter().enumerate() {
        lane_events(i + 1, lane, &mut events)?;
    }
    events.out.write_all(b"\n]}\n")?;
    Ok(())
}

/// The name shown for thread `tid` of process `pid`.
fn thread_name(pid: usize, tid: u32, name: &str) -> Event<'static> {
    meta(pid, tid, "thread_name", json!({ "name": name }))
}

fn meta(pid: usize, tid: u32, name: &'static str, args: Value) -> Event<'static> {
    Event {
        name: name.to_owned(),
        ph: "M",
        pid,
        tid,
        ts: None,
        dur: None,
        s: None,
        cat: None,
        args,
    }
}

fn counter(pid: usize, at: f64, name: String, bytes: u64) -> Event<'static> {
    Event {
        name,
        ph: "C",
        pid,
        tid: MEMORY_TID,
        ts: Some(micros(at)),
        dur: None,
        s: None,
        cat: Some("memory"),
        args: json!({ "bytes": bytes }),
    }
}

fn instant(pid: usize, at: f64, name: String, cat: &'static str, args: Value) -> Event<'static> {
    Event {
        name,
        ph: "i",
        pid,
        tid: MEMORY_TID,
        ts: Some(micros(at)),
        dur: None,
        s: Some("p"),
        cat: Some(cat),
        args,
    }
}

fn lane_events(pid: usize, lane: &Lane, events: &mut Events<'_>) -> Result<(), ExportError> {
    let t0 = lane.offset_secs;
    events.push(&meta(
        pid,
        0,
        "process_name",
        json!({ "name": one_line(&lane.name) }),
    ))?;
    events.push(&meta(
        pid,
        0,
        "process_sort_index",
        json!({ "sort_index": pid }),
    ))?;
    events.push(&thread_name(pid, MEMORY_TID, "memory"))?;
    for s in lane.samples() {
        let at = t0 + s.at;
        events.push(&counter(pid, at, "RSS".into(), s.process.rss_bytes))?;
        if let Some(mlx) = s.mlx {
            events.push(&counter(pid, at, "MLX active".into(), mlx.active_bytes))?;
            events.push(&counter(pid, at, "MLX cache".into(), mlx.cache_bytes))?;
        }
        if let Some(gpu) = s.gpu {
            events.push(&counter(
                pid,
                at,
                "GPU (this process)".into(),
                gpu.process_bytes,
            ))?;
        }
    }
    let walk = matches!(lane.kind, LaneKind::Walk(_));
    for e in lane.events() {
        let at = t0 + e.t_secs;
        if let (Some(shard), Some(bytes)) = (&e.shard, e.shard_resident_bytes) {
            events.push(&counter(
                pid,
                at,
                format!("resident {}", one_line(shard)),
                bytes,
            ))?;
        }
        if walk && e.kind == MarkKind::WalkStep {
            // A span on the walk's thread (`walk_spans`), not an instant.
            continue;
        }
        let args = json!({
            "kind": e.kind.as_str(),
            "target": e.target,
            "bytes": e.bytes,
            "detail": e.detail,
        });
        events.push(&instant(pid, at, one_line(&e.label()), "mark", args))?;
    }
    if let Some((at, bytes, what)) = lane.peak() {
        let name = format!("peak: {what} {}", crate::units::human_bytes(bytes));
        let args = json!({ "bytes": bytes, "series": what });
        events.push(&instant(pid, t0 + at, name, "peak", args))?;
    }
    if let LaneKind::Recording(r) = &lane.kind
        && let Some(kill) = &r.memory_kill
    {
        let args = json!({ "cgroup": kill.cgroup, "limit_bytes": kill.limit_bytes });
        let name = "killed for memory (the kernel's OOM killer)".to_owned();
        events.push(&instant(pid, t0 + r.elapsed_secs, name, "kill", args))?;
    }
    if lane.cut_short() {
        let end = lane.samples().last().map_or(0.0, |s| s.at);
        let name = "journal cut short: the recorder stopped before the job ended".to_owned();
        events.push(&instant(pid, t0 + end, name, "cut", json!({})))?;
    }
    if walk {
        walk_spans(pid, lane, events)?;
    }
    census_events(pid, lane, events)
}

/// A walk's shards and tensors as nested spans: each tensor from the
/// walk's previous event to its step, each shard from its first tensor's
/// start to its release (or its last tensor's end).
fn walk_spans(pid: usize, lane: &Lane, events: &mut Events<'_>) -> Result<(), ExportError> {
    let t0 = lane.offset_secs;
    events.push(&thread_name(pid, WALK_TID, "walk"))?;
    let span = |name: String, from: f64, to: f64, cat: &'static str, args: Value| Event {
        name,
        ph: "X",
        pid,
        tid: WALK_TID,
        ts: Some(micros(t0 + from)),
        dur: Some(micros((to - from).max(0.0))),
        s: None,
        cat: Some(cat),
        args,
    };
    // A shard left for the next one, or at the walk's end, unreleased.
    let shard_span = |name: String, start: f64, end: f64, bytes: u64| {
        span(
            one_line(&name),
            start,
            end,
            "shard",
            json!({ "bytes": bytes }),
        )
    };
    // The shard being walked: its name, when its first tensor began, when
    // its last ended, its tensors' bytes.
    let mut shard: Option<(String, f64, f64, u64)> = None;
    let mut previous: Option<f64> = None;
    for e in lane.events() {
        match e.kind {
            MarkKind::WalkStep => {
                let from = previous.unwrap_or(e.t_secs);
                let file = e.shard.clone().unwrap_or_default();
                if shard.as_ref().is_some_and(|(s, ..)| *s != file)
                    && let Some((name, start, end, bytes)) = shard.take()
                {
                    events.push(&shard_span(name, start, end, bytes))?;
                }
                let entry = shard.get_or_insert((file, from, from, 0));
                entry.2 = e.t_secs;
                entry.3 += e.bytes;
                let args = json!({ "bytes": e.bytes, "shard": e.shard, "detail": e.detail });
                events.push(&span(one_line(&e.target), from, e.t_secs, "tensor", args))?;
            }
            MarkKind::ReleaseShard => {
                if shard.as_ref().is_some_and(|(s, ..)| *s == e.target)
                    && let Some((name, start, _, bytes)) = shard.take()
                {
                    let args = json!({ "bytes": bytes, "freed_bytes": e.bytes });
                    events.push(&span(one_line(&name), start, e.t_secs, "shard", args))?;
                }
            }
            MarkKind::WalkStart | MarkKind::Release => {}
            _ => continue,
        }
        previous = Some(e.t_secs);
    }
    if let Some((name, start, end, bytes)) = shard {
        events.push(&shard_span(name, start, end, bytes))?;
    }
    Ok(())
}

/// The probe's held-by walks, as spans on the probe's thread.
fn census_events(pid: usize, lane: &Lane, events: &mut Events<'_>) -> Result<(), ExportError> {
    let t0 = lane.offset_secs;
    if !lane.censuses().is_empty() {
        events.push(&thread_name(pid, PROBE_TID, "probe"))?;
    }
    for c in lane.censuses() {
        let secs = c.millis / 1e3;
        let roots: Vec<String> = c
            .roots
            .iter()
            .take(3)
            .map(|r| {
                format!(
                    "{} {}",
                    one_line(&r.root),
                    crate::units::human_bytes(r.bytes)
                )
            })
            .collect();
        events.push(&Event {
            name: "held-by walk".into(),
            ph: "X",
            pid,
            tid: PROBE_TID,
            ts: Some(micros(t0 + c.t_secs - secs)),
            dur: Some(micros(secs)),
            s: None,
            cat: Some("probe"),
            args: json!({
                "pid": c.pid,
                "mlx_active_bytes": c.active_bytes,
                "reached_bytes": c.reached_bytes,
                "partial": c.partial,
                "roots": roots,
            }),
        })?;
    }
    Ok(())
}
