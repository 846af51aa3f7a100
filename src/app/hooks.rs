//! What tests, benchmarks and scripted runs ask of the app beyond the
//! command bus: waiting for the worker, the recorder and the sampler, and
//! reading what the panels hold. Compiled only for the crate's own tests
//! and with the `test-hooks` feature (on for this package's integration
//! tests and benchmarks through its dev-dependency on itself).

use std::time::Instant;

use crate::mlx::MemoryStats;
use crate::profile::analysis::recording::Recording;
use crate::profile::capture::Update;
use crate::profile::{Sampler, Timeline};
use crate::weights::{DiffReport, ViewInfo};
use crate::worker::{EventKind, WorkerGone};

use super::background::RecorderEvent;
use super::{Tab, WeightscopeApp};

impl WeightscopeApp {
    /// Blocks until the worker's next event and applies it. For tests and
    /// scripted runs only: a UI never waits on the worker.
    ///
    /// # Errors
    /// When the worker has stopped.
    pub fn wait_for_worker(&mut self) -> Result<(), WorkerGone> {
        let event = self.worker.recv()?;
        self.apply(event);
        Ok(())
    }

    /// Blocks until the worker's next event of any kind (open progress
    /// included) and applies it; returns whether it was open progress. For
    /// tests and scripted runs only.
    ///
    /// # Errors
    /// When the worker has stopped.
    pub fn wait_for_any_event(&mut self) -> Result<bool, WorkerGone> {
        let event = self.worker.recv_any()?;
        let progress = matches!(event.kind, EventKind::OpenProgress { .. });
        self.apply(event);
        Ok(progress)
    }

    /// Blocks until the memory sampler's next sample and records it. For
    /// tests and scripted runs only. Returns whether a sample came.
    pub fn wait_for_sample(&mut self) -> bool {
        match self.sampler.as_ref().and_then(Sampler::recv) {
            Some(sample) => {
                self.timeline.push_sample(&sample);
                true
            }
            None => false,
        }
    }

    /// Blocks until the recording in progress ends, applying what it sends.
    /// For tests and scripted runs only. Returns whether one was running.
    pub fn wait_for_recording(&mut self) -> bool {
        let mut waited = false;
        while let Some(event) = self.recorder.as_ref().and_then(|r| r.events.recv().ok()) {
            waited = true;
            self.apply_recorder(event);
        }
        waited
    }

    /// Blocks until the recording in progress has taken its first sample
    /// (its pid is known), applying what it sends. For tests and scripted
    /// runs only. Returns whether it got there (false: it ended first).
    pub fn wait_for_recording_started(&mut self) -> bool {
        while let Some(event) = self.recorder.as_ref().and_then(|r| r.events.recv().ok()) {
            let started = matches!(event, RecorderEvent::Update(Update::Started(_)));
            self.apply_recorder(event);
            if started {
                return true;
            }
        }
        false
    }

    /// Whether a recording runs.
    #[must_use]
    pub fn is_recording(&self) -> bool {
        self.profiler.is_recording()
    }

    /// The last recording and its findings.
    #[must_use]
    pub fn last_recording(&self) -> Option<(&Recording, &[crate::profile::Finding])> {
        self.profiler.last_recording()
    }

    /// Whether a walk is running.
    #[must_use]
    pub fn is_walking(&self) -> bool {
        self.profiler.is_walking()
    }

    /// The last finished walk's outcome and findings.
    #[must_use]
    pub fn last_walk(&self) -> Option<(&crate::profile::WalkOutcome, &[crate::profile::Finding])> {
        self.profiler.last_walk()
    }

    /// The trace "Save trace…" writes: the last walk when there is one, else
    /// the whole session.
    #[must_use]
    pub fn trace_to_save(&self) -> crate::profile::Trace {
        self.profiler.trace_to_save(&self.profiler_inputs())
    }

    /// Blocks until a trace being loaded is in (or its error is shown). For
    /// tests and scripted runs only.
    pub fn wait_for_trace(&mut self) {
        self.profiler.poll_trace_load(true);
    }

    /// The selected moment on the session clock.
    #[must_use]
    pub fn selected_moment(&self) -> Option<f64> {
        self.profiler.selected_moment()
    }

    /// Selects a moment (as clicking an event row does).
    pub fn select_moment(&mut self, t_secs: f64) {
        self.profiler.select_moment(t_secs);
    }

    /// Whether a diff is running.
    #[must_use]
    pub fn is_diffing(&self) -> bool {
        self.diff.is_running()
    }

    /// The last diff's report.
    #[must_use]
    pub fn diff_report(&self) -> Option<&DiffReport> {
        self.diff.report()
    }

    /// Whether the inspector waits for a tensor.
    #[must_use]
    pub fn is_materializing(&self) -> bool {
        self.inspector.is_pending()
    }

    /// The text in the checkpoint path field.
    #[must_use]
    pub fn path_input(&self) -> &str {
        &self.path_input
    }

    /// The inspector's tensor (shown, pending or failed).
    #[must_use]
    pub fn inspected_name(&self) -> Option<&str> {
        self.inspector.name()
    }

    /// The keys of the inspector's cached heatmap textures.
    #[must_use]
    pub fn heatmap_keys(&self) -> Vec<String> {
        self.inspector.heatmap_keys()
    }

    /// Whether a value scan runs.
    #[must_use]
    pub fn is_checking_values(&self) -> bool {
        self.check.is_scanning()
    }

    /// Whether the value scan was asked to stop (its token is cancelled).
    #[must_use]
    pub fn value_scan_cancel_requested(&self) -> bool {
        self.check.cancel_requested()
    }

    /// Freezes what changes by itself or differs between machines (live
    /// memory samples and figures, the machine's memory, the path field) so
    /// that image snapshots compare across runs and machines. For snapshot
    /// tests only: call it once the worker has answered everything.
    pub fn freeze_for_snapshots(&mut self) {
        self.sampler = None;
        self.timeline = Timeline::new(Instant::now());
        self.memory = MemoryStats {
            active_bytes: 0,
            cache_bytes: 0,
            peak_bytes: 0,
            limit_bytes: 16 << 30,
        };
        self.profiler.set_machine(crate::memory::MachineMemory {
            total_bytes: 32 << 30,
            available_bytes: 24 << 30,
        });
        "(snapshot)".clone_into(&mut self.path_input);
        self.inspector.freeze_times();
    }

    /// The tab the central area shows.
    #[must_use]
    pub fn tab(&self) -> Tab {
        self.tab
    }

    /// The installed view, if any.
    #[must_use]
    pub fn view(&self) -> Option<&ViewInfo> {
        self.tensors.view.as_deref()
    }

    /// Sets the tensors filter (as if typed) and applies it.
    pub fn set_filter(&mut self, filter: &str) {
        if let Some(checkpoint) = &self.checkpoint {
            self.tensors.set_filter(checkpoint, filter);
        }
    }

    /// Starts a walk of the open checkpoint with the profiler's policy and
    /// transform.
    pub fn start_walk(&mut self) {
        self.with_profiler(|profiler, inputs| profiler.start_walk(inputs));
        self.run_commands();
    }

    /// The checkpoint open now, as it was asked for.
    #[must_use]
    pub fn opened_path(&self) -> Option<&std::path::Path> {
        self.opened_path.as_deref()
    }

    /// The profiler's overlays, as their chips name them.
    #[must_use]
    pub fn overlay_names(&self) -> Vec<String> {
        self.profiler.overlay_names()
    }

    /// The merged report of journals of several hosts, as shown.
    #[must_use]
    pub fn merged_report(&self) -> Vec<String> {
        self.profiler.merged_report().to_vec()
    }

    /// What the previews hold, by the worker's last word.
    #[must_use]
    pub fn previews_held(&self) -> &crate::weights::PreviewsHeld {
        &self.previews
    }

    /// Whether the command palette is open.
    #[must_use]
    pub fn palette_is_open(&self) -> bool {
        self.palette.is_open()
    }

    /// The palette's highlighted row, as it reads in the list.
    #[must_use]
    pub fn palette_chosen(&self) -> Option<String> {
        self.palette.chosen_label(self.checkpoint.as_deref())
    }

    /// The selected tensor's stored name in the Tensors tab.
    #[must_use]
    pub fn selected_tensor(&self) -> Option<&str> {
        let checkpoint = self.checkpoint.as_deref()?;
        self.tensors.selected_name(checkpoint)
    }

    /// The diff's opened row, when it has arrived.
    #[must_use]
    pub fn diff_detail(&self) -> Option<&crate::weights::PairDetail> {
        self.diff.detail()
    }

    /// Whether the diff's opened row is being computed.
    #[must_use]
    pub fn diff_detail_is_pending(&self) -> bool {
        self.diff.detail_is_pending()
    }
}
