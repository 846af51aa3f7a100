//! The threads the window starts besides the MLX worker and the memory
//! sampler: the `recorder` of a recorded job, a `trace-write` per trace
//! saved or exported, a `traces-merge` per set of journals, a `trace-load` per trace
//! opened, a `file-dialog` per dialog (rfd blocks). Each is [`spawn`]: a
//! named thread whose results come back on a channel, with the wake
//! callback (a repaint request) after each, so the UI never waits on one.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use crate::profile::analysis::recording::Recording;
use crate::profile::capture::{RecordControl, RecordError, RecordOptions, Target, Update};

/// Wakes the UI (a repaint request) from another thread.
pub(super) type Wake = Arc<dyn Fn() + Send + Sync>;

/// Runs `work` on a new thread named `name`; each value it passes to its
/// `send` goes to `tx`, then `wake` is called.
///
/// # Errors
/// When the thread cannot be started.
pub(super) fn spawn_into<T: Send + 'static>(
    name: &str,
    tx: Sender<T>,
    wake: Wake,
    work: impl FnOnce(&dyn Fn(T)) + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let send = |value: T| {
                let _ = tx.send(value);
                wake();
            };
            work(&send);
        })
        .map(drop)
}

/// [`spawn_into`] a new channel, whose receiving end is returned.
///
/// # Errors
/// When the thread cannot be started.
pub(super) fn spawn<T: Send + 'static>(
    name: &str,
    wake: Wake,
    work: impl FnOnce(&dyn Fn(T)) + Send + 'static,
) -> std::io::Result<Receiver<T>> {
    let (tx, rx) = mpsc::channel();
    spawn_into(name, tx, wake, work)?;
    Ok(rx)
}

/// What the recorder thread sends the app.
pub(super) enum RecorderEvent {
    /// A sample, an event, the job's pid.
    Update(Update),
    /// The recording ended (or could not start).
    Finished(Result<Box<Recording>, RecordError>),
}

/// Records `target` on the `recorder` thread; `control` stops it.
///
/// # Errors
/// When the thread cannot be started.
pub(super) fn record(
    target: Target,
    options: RecordOptions,
    control: RecordControl,
    wake: Wake,
    samples: super::SampleWakes,
) -> std::io::Result<Receiver<RecorderEvent>> {
    // The window is woken when a sample came, at most a few times a
    // second in all with its own sampler's wakes (every update would
    // redraw it 20+ times a second, which the recorded job pays for on a
    // small machine), and when the job ended.
    let quiet: Wake = Arc::new(|| {});
    spawn("recorder", quiet, move |send| {
        let result = crate::profile::capture::record(&target, &options, &control, |update| {
            let sample = matches!(update, Update::Sample(_) | Update::Started(_));
            send(RecorderEvent::Update(update));
            if sample {
                samples.wake_at_most(super::profiler::LIVE_FRAME);
            }
        });
        send(RecorderEvent::Finished(result.map(Box::new)));
        wake();
    })
}

/// Reads and parses the trace at `path` on a `trace-load` thread (a long
/// recording's is hundreds of MB).
///
/// # Errors
/// When the thread cannot be started.
pub(super) fn load_trace(
    path: PathBuf,
    wake: Wake,
) -> std::io::Result<Receiver<super::profiler::Loaded>> {
    spawn("trace-load", wake, move |send| {
        send(super::profiler::Loaded::One(super::profiler::read_trace(
            &path,
        )));
    })
}

/// Saves or exports a trace on a thread of its own (`trace-write`); its
/// answer is the line to show.
pub(super) fn write_trace(
    job: super::profiler::TraceWrite,
    wake: Wake,
) -> std::io::Result<Receiver<String>> {
    spawn("trace-write", wake, move |send| send(job.run()))
}

/// Reads and merges the journals at `paths` on a thread of its own.
pub(super) fn load_traces(
    paths: Vec<PathBuf>,
    shown: crate::profile::analysis::journals::ShownLane,
    wake: Wake,
) -> std::io::Result<Receiver<super::profiler::Loaded>> {
    spawn("traces-merge", wake, move |send| {
        send(super::profiler::Loaded::Several(
            super::profiler::read_traces(&paths, shown),
        ));
    })
}
