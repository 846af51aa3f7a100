//! The worker thread's loop and each request's handler: opening a
//! checkpoint, previews within their budget, releases, walks, diffs and
//! value scans, each long job with its cancel token and its listener.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Instant;

use crate::checkpoint::ShardId;
use crate::checkpoint::check::check_headers;
use crate::memory::{Mark, MarkKind, Policy, Sample};
use crate::mlx::{self};
use crate::profile::{self, Transform};
use crate::weights::{OpenStep, PreviewBudget, PreviewOptions, ViewChoice, Weights, WeightsError};

use super::{CancelToken, Event, EventKind, OpenedFacts, Request, RequestError, RequestKind};

pub(super) fn run(
    commands: &Receiver<Request>,
    events: &SyncSender<Event>,
    wake: &(dyn Fn() + Send + Sync),
    running: &std::sync::Mutex<Option<CancelToken>>,
    shutdown: &AtomicBool,
) {
    let mut weights: Option<Weights> = None;
    let mut budget = PreviewBudget::default();
    // What the previews hold, as each event says it.
    let held = std::sync::Mutex::new(budget.held_nothing());
    let options = PreviewOptions::default();
    let mut warmed = false;
    let send = |kind: EventKind, mark: Option<Mark>, sample: Sample<Instant>| {
        let event = Event {
            kind,
            memory: mlx::memory().unwrap_or_default(),
            previews: held.lock().map(|h| h.clone()).unwrap_or_default(),
            at: sample.at,
            sample,
            mark,
        };
        let sent = events.send(event).is_ok();
        wake();
        sent
    };
    for command in commands {
        let token = match &command {
            Request::Walk { cancel, .. }
            | Request::Diff { cancel, .. }
            | Request::ScanValues { cancel } => Some(cancel.clone()),
            _ => None,
        };
        if let Some(token) = &token {
            if shutdown.load(Ordering::Relaxed) {
                continue; // the window is closing: queued jobs are skipped
            }
            if let Ok(mut slot) = running.lock() {
                *slot = Some(token.clone());
            }
        }
        // No input may stop the worker: a panic inside a job (a bug, or a
        // library's assertion on a shape from a file) is reported as that
        // job's failure, and the next command is served (what the job had
        // made is dropped as the panic unwinds; what was open stays open).
        let reply = PanicReply::of(&command);
        let listening = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut previews = Previews {
                budget: &mut budget,
                held: &held,
            };
            handle(command, &mut weights, &mut previews, &options, &send)
        })) {
            Ok(listening) => listening,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                send(reply.event(message), None, crate::mlx::sample_now())
            }
        };
        if token.is_some()
            && let Ok(mut slot) = running.lock()
        {
            *slot = None;
        }
        if !listening {
            break; // nobody listens any more
        }
        // On a GPU the first summary compiles kernels: do it after the
        // first command (the open), not when a tensor is clicked; ours on a
        // thread of their own (a click meanwhile is summarized by MLX's
        // ops, not kept waiting).
        if !warmed {
            warmed = true;
            // The window lives long: our kernels pay for their compilation
            // after a summary or two.
            mlx::use_summary_kernel(true);
            mlx::warm_up_summaries_in_background();
        }
    }
    // Arrays and maps are freed here, on the thread that made them.
    drop(weights);
}

/// What the app waits for after a command, to be sent when the command
/// panicked instead.
enum PanicReply {
    Open(PathBuf),
    Failed(RequestKind, String),
    Diff,
    DiffTensor(String),
    Scan,
}

impl PanicReply {
    fn of(command: &Request) -> Self {
        match command {
            Request::Open(path) | Request::OpenWithView(path, _) => Self::Open(path.clone()),
            Request::Materialize(name) => Self::Failed(RequestKind::Materialize, name.clone()),
            Request::Release(name) | Request::PinPreview(name, _) => {
                Self::Failed(RequestKind::Release, name.clone())
            }
            Request::ReleaseShard(shard) => {
                Self::Failed(RequestKind::Release, format!("shard {shard:?}"))
            }
            Request::ReleaseAll | Request::Close => {
                Self::Failed(RequestKind::Release, String::new())
            }
            Request::ClearCache => Self::Failed(RequestKind::ClearCache, String::new()),
            Request::SetPreviewBudget(_) => {
                Self::Failed(RequestKind::Limit, "preview budget".into())
            }
            Request::SetMemoryLimit(_) => Self::Failed(RequestKind::Limit, "memory limit".into()),
            Request::SetCacheLimit(_) => Self::Failed(RequestKind::Limit, "cache limit".into()),
            Request::Walk { .. } => Self::Failed(RequestKind::Walk, "walk".into()),
            Request::Diff { .. } => Self::Diff,
            Request::DiffTensor { name, .. } => Self::DiffTensor(name.clone()),
            Request::ScanValues { .. } => Self::Scan,
        }
    }

    fn event(self, message: String) -> EventKind {
        let error = RequestError::Panicked(message);
        match self {
            Self::Open(path) => EventKind::OpenFailed { path, error },
            Self::Failed(job, target) => failed(job, target, error),
            Self::Diff => EventKind::DiffFinished(Err(error)),
            Self::DiffTensor(name) => EventKind::DiffDetail(name, Err(error)),
            Self::Scan => EventKind::ScanFinished(Err(error)),
        }
    }
}

/// A panic's message, when it has one.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// Sends a job's events while anybody listens; once nobody does (the app
/// is gone), sets the job's cancel flag so that it stops at its next tensor.
struct Listener<'a> {
    send: &'a SendEvent<'a>,
    cancel: &'a AtomicBool,
    listening: bool,
}

impl<'a> Listener<'a> {
    fn new(send: &'a SendEvent<'a>, cancel: &'a AtomicBool) -> Self {
        Self {
            send,
            cancel,
            listening: true,
        }
    }

    fn send(&mut self, kind: EventKind, mark: Option<Mark>, sample: Sample<Instant>) {
        if self.listening {
            self.listening = (self.send)(kind, mark, sample);
        }
        if !self.listening {
            self.cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// How the worker's jobs send an event (with its mark and memory sample);
/// `false` when nobody listens any more.
type SendEvent<'s> = dyn Fn(EventKind, Option<Mark>, Sample<Instant>) -> bool + Sync + 's;

/// Runs a diff of the open checkpoint against `other`, streaming its
/// progress; returns whether anybody still listens.
fn diff_job(
    weights: Option<&mut Weights>,
    other: &std::path::Path,
    view: &ViewChoice,
    cancel: &AtomicBool,
    send: &SendEvent<'_>,
) -> bool {
    let Some(w) = weights else {
        let kind = EventKind::DiffFinished(Err(RequestError::NotOpen));
        return send(kind, None, crate::mlx::sample_now());
    };
    let result = Weights::open_viewed(other, view)
        .map_err(RequestError::from)
        .map(|mut b| {
            let mut listener = Listener::new(send, cancel);
            let report = crate::weights::diff(w, &mut b, cancel, &mut |p| {
                listener.send(EventKind::Diffed(p), None, crate::mlx::sample_now());
            });
            Box::new(report)
        });
    let mark = match &result {
        Ok(r) => Mark::new(MarkKind::DiffEnd, "diff").detail(format!(
            "diff with {}: {} compared, {} differ{}",
            other.display(),
            r.common.len(),
            r.differing().count(),
            if r.cancelled { ", cancelled" } else { "" }
        )),
        Err(e) => Mark::new(MarkKind::DiffEnd, "diff").detail(format!("failed: {e}")),
    };
    send(
        EventKind::DiffFinished(result),
        Some(mark),
        crate::mlx::sample_now(),
    )
}

/// Opens one tensor of a diff of the open checkpoint against `other`.
fn diff_detail(
    weights: Option<&mut Weights>,
    other: &std::path::Path,
    view: &ViewChoice,
    name: String,
    options: &PreviewOptions,
) -> EventKind {
    let Some(a) = weights else {
        return EventKind::DiffDetail(name, Err(RequestError::NotOpen));
    };
    let result = Weights::open_viewed(other, view)
        .and_then(|mut b| crate::weights::diff_detail(a, &mut b, &name, options.heatmap / 2))
        .map(Box::new)
        .map_err(RequestError::from);
    EventKind::DiffDetail(name, result)
}

/// Runs a walk on the open checkpoint, streaming its moments; returns
/// whether anybody still listens.
fn walk_job(
    weights: Option<&mut Weights>,
    policy: Policy,
    transform: Transform,
    cancel: &AtomicBool,
    send: &SendEvent<'_>,
) -> bool {
    let Some(w) = weights else {
        return send(
            failed(RequestKind::Walk, "walk", RequestError::NotOpen),
            None,
            crate::mlx::sample_now(),
        );
    };
    let mut listener = Listener::new(send, cancel);
    let outcome = profile::walk(w, policy, transform, cancel, &mut |recorded| {
        let (mark, sample) = (recorded.mark.clone(), recorded.memory);
        listener.send(EventKind::WalkEnd(Box::new(recorded)), Some(mark), sample);
    });
    send(
        EventKind::WalkFinished(Box::new(outcome)),
        None,
        crate::mlx::sample_now(),
    )
}

/// Runs a value scan on the open checkpoint, streaming its progress;
/// returns whether anybody still listens.
fn scan_job(weights: Option<&mut Weights>, cancel: &AtomicBool, send: &SendEvent<'_>) -> bool {
    let Some(w) = weights else {
        let kind = EventKind::ScanFinished(Err(RequestError::NotOpen));
        return send(kind, None, crate::mlx::sample_now());
    };
    let mut listener = Listener::new(send, cancel);
    let scan = crate::weights::scan_values(w, cancel, &mut |p| {
        listener.send(EventKind::Scanned(p), None, crate::mlx::sample_now());
    });
    let mark = Mark::new(MarkKind::CheckEnd, "check values").detail(format!(
        "{} of {} tensors read, {} findings{}",
        scan.scanned,
        scan.total,
        scan.findings.len(),
        if scan.cancelled { ", cancelled" } else { "" }
    ));
    send(
        EventKind::ScanFinished(Ok(Box::new(scan))),
        Some(mark),
        crate::mlx::sample_now(),
    )
}

/// The profiler's record of a (non-walk) event, with the residency of the
/// shard it touched by the core's bookkeeping.
fn mark_of(kind: &EventKind, weights: Option<&Weights>) -> Option<Mark> {
    let resident_of = |file: &str| -> u64 {
        weights
            .and_then(|w| Some(w.resident_bytes(w.checkpoint().find_shard(file)?)))
            .unwrap_or(0)
    };
    let mark = match kind {
        EventKind::Opened {
            path,
            checkpoint,
            view,
            ..
        } => Mark::new(MarkKind::Open, path.display().to_string()).detail(format!(
            "{}, view {}",
            crate::units::count_of(checkpoint.shards().len(), "shard", "shards"),
            view.as_ref().map_or("none", |v| v.name.as_str())
        )),
        EventKind::Materialized(p) => Mark::new(MarkKind::Materialize, p.name.as_str())
            .bytes(p.bytes)
            .detail(p.device.as_str())
            .resident(p.shard.as_str(), resident_of(&p.shard)),
        EventKind::Released(name) => {
            let mut mark = Mark::new(MarkKind::Release, name.as_str());
            if let Some((info, file)) =
                weights.and_then(|w| Some((w.info(name)?, w.file_of(name)?)))
            {
                mark = mark.bytes(info.bytes()).resident(file, resident_of(file));
            }
            mark
        }
        EventKind::ShardReleased { file, freed_bytes } => {
            Mark::new(MarkKind::ReleaseShard, file.as_str())
                .bytes(*freed_bytes)
                .resident(file.as_str(), 0)
        }
        EventKind::ReleasedAll => Mark::new(MarkKind::ReleaseAll, ""),
        EventKind::Forgotten(f) => {
            let mut mark = Mark::new(MarkKind::Release, f.name.as_str())
                .bytes(f.freed_bytes)
                .detail("preview budget: let go, least recently shown");
            if let Some(file) = weights.and_then(|w| w.file_of(&f.name)) {
                mark = mark.resident(file, resident_of(file));
            }
            mark
        }
        EventKind::CacheCleared { trimmed } => {
            Mark::new(MarkKind::ClearCache, "").detail(if *trimmed {
                "heap trimmed: yes"
            } else {
                "heap trimmed: no"
            })
        }
        EventKind::MemoryLimitSet { previous } => Mark::new(MarkKind::MemoryLimit, "")
            .bytes(mlx::memory().map_or(0, |m| m.limit_bytes))
            .detail(format!("was {}", crate::units::human_bytes(*previous))),
        EventKind::CacheLimitSet { limit } => Mark::new(MarkKind::CacheLimit, "").bytes(*limit),
        EventKind::Failed { target, error, .. } => {
            Mark::new(MarkKind::Error, target.as_str()).detail(error.to_string())
        }
        EventKind::Closed => Mark::new(MarkKind::Close, ""),
        EventKind::OpenFailed { .. }
        | EventKind::PreviewsChanged
        | EventKind::OpenProgress { .. }
        | EventKind::WalkEnd(_)
        | EventKind::WalkFinished(_)
        | EventKind::Diffed(_)
        | EventKind::DiffDetail(..)
        | EventKind::DiffFinished(_)
        | EventKind::Scanned(_)
        | EventKind::ScanFinished(_) => {
            return None;
        }
    };
    Some(mark)
}

/// Opens `path` with progress events; returns whether anybody still listens.
fn open_job(
    weights: &mut Option<Weights>,
    path: &std::path::Path,
    choice: &ViewChoice,
    send: &SendEvent<'_>,
) -> bool {
    // About 50 progress events per phase, whatever the shard count; the
    // header phase reports from several parsing threads at once.
    let last = std::sync::Mutex::new(None::<(bool, usize)>);
    let report = |step: OpenStep| {
        let (maps, done, total) = match step {
            OpenStep::Headers { parsed, total } => (false, parsed, total),
            OpenStep::Maps { opened, total } => (true, opened, total),
        };
        let bucket = done * 50 / total.max(1);
        let Ok(mut last) = last.lock() else { return };
        if last.is_some_and(|(m, b)| m == maps && b >= bucket) {
            return;
        }
        *last = Some((maps, bucket));
        send(
            EventKind::OpenProgress {
                path: path.to_path_buf(),
                step,
            },
            None,
            crate::mlx::sample_now(),
        );
    };
    let kind = open(weights, path.to_path_buf(), choice, &report);
    let mark = mark_of(&kind, weights.as_ref());
    send(kind, mark, crate::mlx::sample_now())
}

/// Opens `path` and installs the chosen view; a view that cannot be made
/// leaves the checkpoint open without one and says why.
fn open(
    weights: &mut Option<Weights>,
    path: PathBuf,
    choice: &ViewChoice,
    report: &(dyn Fn(OpenStep) + Sync),
) -> EventKind {
    // The open checkpoint stays until the new one has opened: a failed open
    // leaves what worked working.
    let mut opened = match Weights::open_reporting(&path, report) {
        Ok(opened) => opened,
        Err(err) => {
            return EventKind::OpenFailed {
                path,
                error: err.into(),
            };
        }
    };
    let (view, view_error) = match opened.install_choice(choice) {
        Ok(view) => (view, None),
        Err(err) => (None, Some(err.into())),
    };
    let checkpoint = opened.shared_checkpoint();
    // Nothing of it opened (a file that is not safetensors, a folder whose
    // every shard is broken): a failed open, as the CLI says it, and what
    // was open stays. A checkpoint with some shards broken opens, the
    // broken ones shown and counted by the check.
    if checkpoint.shards().is_empty()
        && let Some(&problem) = checkpoint.fatal_problems().first()
    {
        return EventKind::OpenFailed {
            path,
            error: WeightsError::from(problem.clone()).into(),
        };
    }
    let facts = Box::new(OpenedFacts::of(&checkpoint));
    let findings = check_headers(&checkpoint, &facts.summary);
    // The old one's arrays and maps go first, then the new one takes its place.
    *weights = None;
    *weights = Some(opened);
    EventKind::Opened {
        path,
        checkpoint,
        view,
        view_error,
        findings,
        facts,
    }
}

/// The previews' budget, and what each event says they hold.
struct Previews<'a> {
    budget: &'a mut PreviewBudget,
    held: &'a std::sync::Mutex<crate::weights::PreviewsHeld>,
}

impl Previews<'_> {
    /// Brings what events say the previews hold up to date.
    fn update(&self, weights: Option<&Weights>) {
        let now = match weights {
            Some(w) => self.budget.held(w),
            None => self.budget.held_nothing(),
        };
        if let Ok(mut held) = self.held.lock() {
            *held = now;
        }
    }
}

/// Shows `name`, keeps the previews within their budget, and sends each
/// preview let go (with its mark), then the one shown: every event says
/// what the previews hold after both.
fn materialize_within_budget(
    weights: &mut Option<Weights>,
    previews: &mut Previews<'_>,
    name: &str,
    options: &PreviewOptions,
    send: &SendEvent<'_>,
) -> bool {
    let kind = materialize(weights.as_mut(), name.to_owned(), options);
    if let (EventKind::Materialized(_), Some(w)) = (&kind, weights.as_mut()) {
        let forgotten = previews.budget.shown(w, name);
        previews.update(weights.as_ref());
        if !send_forgotten(weights.as_ref(), forgotten, send) {
            return false;
        }
    }
    let mark = mark_of(&kind, weights.as_ref());
    send(kind, mark, crate::mlx::sample_now())
}

/// Sends each preview let go (or why letting go failed).
fn send_forgotten(
    weights: Option<&Weights>,
    forgotten: Result<Vec<crate::weights::Forgotten>, WeightsError>,
    send: &SendEvent<'_>,
) -> bool {
    match forgotten {
        Ok(list) => list.into_iter().all(|f| {
            let kind = EventKind::Forgotten(f);
            let mark = mark_of(&kind, weights);
            send(kind, mark, crate::mlx::sample_now())
        }),
        Err(err) => send(
            failed(RequestKind::Release, "preview budget", err),
            None,
            crate::mlx::sample_now(),
        ),
    }
}

/// Runs one command: a job streams its own events; any other command makes
/// one event, sent with its mark. Returns whether anybody still listens.
fn handle(
    command: Request,
    weights: &mut Option<Weights>,
    previews: &mut Previews<'_>,
    options: &PreviewOptions,
    send: &SendEvent<'_>,
) -> bool {
    let listening = match command {
        Request::Materialize(name) => {
            return materialize_within_budget(weights, previews, &name, options, send);
        }
        Request::SetPreviewBudget(_) | Request::PinPreview(..) => {
            match command {
                Request::SetPreviewBudget(bytes) => previews.budget.set_limit(bytes),
                Request::PinPreview(name, pinned) => previews.budget.pin(&name, pinned),
                _ => {}
            }
            let budget = &mut *previews.budget;
            let forgotten = weights
                .as_mut()
                .map_or(Ok(Vec::new()), |w| budget.enforce(w));
            previews.update(weights.as_ref());
            send_forgotten(weights.as_ref(), forgotten, send)
                && send(EventKind::PreviewsChanged, None, crate::mlx::sample_now())
        }
        Request::Open(_) | Request::OpenWithView(..) | Request::Close => {
            previews.budget.clear();
            previews.update(None);
            handle_plain(command, weights, options, send)
        }
        Request::ReleaseShard(_) | Request::ReleaseAll => {
            // The release may take previews with it: its event says so.
            let kind = match command {
                Request::ReleaseShard(shard) => release_shard(weights.as_mut(), shard),
                _ => release_all(weights.as_mut()),
            };
            previews.update(weights.as_ref());
            let mark = mark_of(&kind, weights.as_ref());
            return send(kind, mark, crate::mlx::sample_now());
        }
        command => handle_plain(command, weights, options, send),
    };
    // A walk or a scan releases what it read: the next event says what
    // the previews still hold.
    previews.update(weights.as_ref());
    listening
}

/// [`handle`] for the commands the budget has no part in.
fn handle_plain(
    command: Request,
    weights: &mut Option<Weights>,
    options: &PreviewOptions,
    send: &SendEvent<'_>,
) -> bool {
    let kind = match command {
        Request::ScanValues { cancel } => return scan_job(weights.as_mut(), cancel.flag(), send),
        Request::Walk {
            policy,
            transform,
            cancel,
        } => return walk_job(weights.as_mut(), policy, transform, cancel.flag(), send),
        Request::Diff {
            other,
            view,
            cancel,
        } => return diff_job(weights.as_mut(), &other, &view, cancel.flag(), send),
        Request::DiffTensor { other, view, name } => {
            diff_detail(weights.as_mut(), &other, &view, name, options)
        }
        Request::Open(path) => return open_job(weights, &path, &ViewChoice::Auto, send),
        Request::OpenWithView(path, choice) => return open_job(weights, &path, &choice, send),
        Request::Materialize(name) => materialize(weights.as_mut(), name, options),
        Request::SetPreviewBudget(_) | Request::PinPreview(..) => return true,
        Request::Release(name) => release(weights.as_mut(), name),
        Request::ReleaseShard(shard) => release_shard(weights.as_mut(), shard),
        Request::ReleaseAll => release_all(weights.as_mut()),
        Request::ClearCache => clear_cache(),
        Request::SetMemoryLimit(bytes) => match mlx::set_memory_limit(bytes) {
            Ok(previous) => EventKind::MemoryLimitSet { previous },
            Err(err) => failed(RequestKind::Limit, "memory limit", err),
        },
        Request::SetCacheLimit(bytes) => match mlx::set_cache_limit(bytes) {
            Ok(_) => EventKind::CacheLimitSet { limit: bytes },
            Err(err) => failed(RequestKind::Limit, "cache limit", err),
        },
        Request::Close => {
            *weights = None;
            EventKind::Closed
        }
    };
    let mark = mark_of(&kind, weights.as_ref());
    send(kind, mark, crate::mlx::sample_now())
}

/// The event of a command that failed, for `target`.
fn failed(
    job: RequestKind,
    target: impl Into<String>,
    error: impl Into<RequestError>,
) -> EventKind {
    EventKind::Failed {
        job,
        target: target.into(),
        error: error.into(),
    }
}

fn materialize(weights: Option<&mut Weights>, name: String, options: &PreviewOptions) -> EventKind {
    let Some(w) = weights else {
        return failed(RequestKind::Materialize, name, RequestError::NotOpen);
    };
    match w.preview(&name, options) {
        Ok(preview) => EventKind::Materialized(Box::new(preview)),
        Err(err) => failed(RequestKind::Materialize, name, err),
    }
}

fn release(weights: Option<&mut Weights>, name: String) -> EventKind {
    let Some(w) = weights else {
        return failed(RequestKind::Release, name, RequestError::NotOpen);
    };
    w.release(&name);
    EventKind::Released(name)
}

fn release_shard(weights: Option<&mut Weights>, shard: ShardId) -> EventKind {
    let Some(w) = weights else {
        return failed(
            RequestKind::Release,
            format!("shard {}", shard.index()),
            RequestError::NotOpen,
        );
    };
    let Some(file) = w
        .checkpoint()
        .shards()
        .get(shard.index())
        .map(|s| s.file.clone())
    else {
        let error = RequestError::NoShard(shard.index());
        return failed(
            RequestKind::Release,
            format!("shard {}", shard.index()),
            error,
        );
    };
    let freed_bytes = w.release_shard(shard);
    EventKind::ShardReleased { file, freed_bytes }
}

fn release_all(weights: Option<&mut Weights>) -> EventKind {
    let Some(w) = weights else {
        return failed(RequestKind::Release, "", RequestError::NotOpen);
    };
    w.release_all();
    EventKind::ReleasedAll
}

fn clear_cache() -> EventKind {
    match mlx::clear_cache() {
        Ok(()) => EventKind::CacheCleared {
            trimmed: mlx::trim_host_heap(),
        },
        Err(err) => failed(RequestKind::ClearCache, "cache", err),
    }
}
