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

/// What tests, benchmarks and scripted runs ask of the app beyond the
/// command bus ([`WeightscopeApp::hooks`]). Each call takes the hooks: ask
/// `app.hooks()` again for the next.
pub struct Hooks<'a> {
    app: &'a mut WeightscopeApp,
}

impl WeightscopeApp {
    /// The test hooks ([`Hooks`]).
    pub fn hooks(&mut self) -> Hooks<'_> {
        Hooks { app: self }
    }
}

impl<'a> Hooks<'a> {
    /// Blocks until the worker's next event and applies it. For tests and
    /// scripted runs only: a UI never waits on the worker.
    ///
    /// # Errors
    /// When the worker has stopped.
    pub fn wait_for_worker(self) -> Result<(), WorkerGone> {
        let event = self.app.worker.recv()?;
        self.app.apply(event);
        Ok(())
    }

    /// Blocks until the worker's next event of any kind (open progress
    /// included) and applies it; returns whether it was open progress. For
    /// tests and scripted runs only.
    ///
    /// # Errors
    /// When the worker has stopped.
    pub fn wait_for_any_event(self) -> Result<bool, WorkerGone> {
        let event = self.app.worker.recv_any()?;
        let progress = matches!(event.kind, EventKind::OpenProgress { .. });
        self.app.apply(event);
        Ok(progress)
    }

    /// Blocks until the memory sampler's next sample and records it. For
    /// tests and scripted runs only. Returns whether a sample came.
    pub fn wait_for_sample(self) -> bool {
        match self.app.sampler.as_ref().and_then(Sampler::recv) {
            Some(sample) => {
                self.app.timeline.push_sample(&sample);
                true
            }
            None => false,
        }
    }

    /// Blocks until the recording in progress ends, applying what it sends.
    /// For tests and scripted runs only. Returns whether one was running.
    #[must_use]
    pub fn wait_for_recording(self) -> bool {
        let mut waited = false;
        while let Some(event) = self
            .app
            .recorder
            .as_ref()
            .and_then(|r| r.events.recv().ok())
        {
            waited = true;
            self.app.apply_recorder(event);
        }
        waited
    }

    /// Blocks until the recording in progress has taken its first sample
    /// (its pid is known), applying what it sends. For tests and scripted
    /// runs only. Returns whether it got there (false: it ended first).
    #[must_use]
    pub fn wait_for_recording_started(self) -> bool {
        while let Some(event) = self
            .app
            .recorder
            .as_ref()
            .and_then(|r| r.events.recv().ok())
        {
            let started = matches!(event, RecorderEvent::Update(Update::Started(_)));
            self.app.apply_recorder(event);
            if started {
                return true;
            }
        }
        false
    }

    /// Whether a recording runs.
    #[must_use]
    pub fn is_recording(&self) -> bool {
        self.app.profiler.is_recording()
    }

    /// The last recording and its findings.
    #[must_use]
    pub fn last_recording(self) -> Option<(&'a Recording, &'a [crate::profile::Finding])> {
        self.app.profiler.last_recording()
    }

    /// Whether a walk is running.
    #[must_use]
    pub fn is_walking(&self) -> bool {
        self.app.profiler.is_walking()
    }

    /// The last finished walk's outcome and findings.
    #[must_use]
    pub fn last_walk(
        self,
    ) -> Option<(
        &'a crate::profile::WalkOutcome,
        &'a [crate::profile::Finding],
    )> {
        self.app.profiler.last_walk()
    }

    /// The trace "Save trace…" writes: the last walk when there is one, else
    /// the whole session.
    #[must_use]
    pub fn trace_to_save(self) -> crate::profile::Trace {
        self.app.with_profiler(|profiler, inputs| {
            std::sync::Arc::unwrap_or_clone(profiler.trace_to_save(inputs))
        })
    }

    /// Blocks until a trace being loaded is in (or its error is shown). For
    /// tests and scripted runs only.
    pub fn wait_for_trace(self) {
        self.app.profiler.poll_trace_load(true);
    }

    /// The selected moment on the session clock.
    #[must_use]
    pub fn selected_moment(self) -> Option<f64> {
        self.app.profiler.selected_moment()
    }

    /// Selects a moment (as clicking an event row does).
    pub fn select_moment(self, t_secs: f64) {
        self.app.profiler.select_moment(t_secs);
    }

    /// Whether a diff is running.
    #[must_use]
    pub fn is_diffing(&self) -> bool {
        self.app.diff.is_running()
    }

    /// The last diff's report.
    #[must_use]
    pub fn diff_report(self) -> Option<&'a DiffReport> {
        self.app.diff.report()
    }

    /// Whether the inspector waits for a tensor.
    #[must_use]
    pub fn is_materializing(&self) -> bool {
        self.app.inspector.is_pending()
    }

    /// The text in the checkpoint path field.
    #[must_use]
    pub fn path_input(self) -> &'a str {
        &self.app.path_input
    }

    /// The inspector's tensor (shown, pending or failed).
    #[must_use]
    pub fn inspected_name(self) -> Option<&'a str> {
        self.app.inspector.name()
    }

    /// The keys of the inspector's cached heatmap textures.
    #[must_use]
    pub fn heatmap_keys(self) -> Vec<String> {
        self.app.inspector.heatmap_keys()
    }

    /// Whether a value scan runs.
    #[must_use]
    pub fn is_checking_values(&self) -> bool {
        self.app.check.is_scanning()
    }

    /// Whether the value scan was asked to stop (its token is cancelled).
    #[must_use]
    pub fn value_scan_cancel_requested(self) -> bool {
        self.app.check.cancel_requested()
    }

    /// Freezes what changes by itself or differs between machines (live
    /// memory samples and figures, the machine's memory, the path field) so
    /// that image snapshots compare across runs and machines. For snapshot
    /// tests only: call it once the worker has answered everything.
    pub fn freeze_for_snapshots(self) {
        self.app.sampler = None;
        self.app.timeline = Timeline::new(Instant::now());
        self.app.memory = MemoryStats {
            active_bytes: 0,
            cache_bytes: 0,
            peak_bytes: 0,
            limit_bytes: 16 << 30,
        };
        self.app.profiler.set_machine(crate::memory::MachineMemory {
            total_bytes: 32 << 30,
            available_bytes: 24 << 30,
        });
        "(snapshot)".clone_into(&mut self.app.path_input);
        self.app.inspector.freeze_times();
    }

    /// The tab the central area shows.
    #[must_use]
    pub fn tab(self) -> Tab {
        self.app.tab
    }

    /// The installed view, if any.
    #[must_use]
    pub fn view(self) -> Option<&'a ViewInfo> {
        self.app.tensors.view.as_deref()
    }

    /// Sets the tensors filter (as if typed) and applies it.
    pub fn set_filter(self, filter: &str) {
        if let Some(checkpoint) = &self.app.checkpoint {
            self.app.tensors.set_filter(checkpoint, filter);
        }
    }

    /// Starts a walk of the open checkpoint with the profiler's policy and
    /// transform.
    pub fn start_walk(self) {
        self.app
            .with_profiler(|profiler, inputs| profiler.start_walk(inputs));
        self.app.run_commands();
    }

    /// The checkpoint open now, as it was asked for.
    #[must_use]
    pub fn opened_path(self) -> Option<&'a std::path::Path> {
        self.app.opened_path.as_deref()
    }

    /// The profiler's overlays, as their chips name them.
    #[must_use]
    pub fn overlay_names(self) -> Vec<String> {
        self.app.profiler.overlay_names()
    }

    /// The merged report of journals of several hosts, as shown.
    #[must_use]
    pub fn merged_report(self) -> Vec<String> {
        self.app.profiler.merged_report().to_vec()
    }

    /// The ranks banded below the timeline of merged journals, by name.
    #[must_use]
    pub fn merged_lane_names(self) -> Vec<String> {
        self.app.profiler.merged_lane_names()
    }

    /// What the previews hold, by the worker's last word.
    #[must_use]
    pub fn previews_held(self) -> &'a crate::weights::PreviewsHeld {
        &self.app.previews
    }

    /// Whether the command palette is open.
    #[must_use]
    pub fn palette_is_open(self) -> bool {
        self.app.palette.is_open()
    }

    /// The palette's highlighted row, as it reads in the list.
    #[must_use]
    pub fn palette_chosen(self) -> Option<String> {
        self.app
            .palette
            .chosen_label(self.app.checkpoint.as_deref())
    }

    /// The selected tensor's stored name in the Tensors tab.
    #[must_use]
    pub fn selected_tensor(self) -> Option<&'a str> {
        let checkpoint = self.app.checkpoint.as_deref()?;
        self.app.tensors.selected_name(checkpoint)
    }

    /// The diff's opened row, when it has arrived.
    #[must_use]
    pub fn diff_detail(self) -> Option<&'a crate::weights::PairDetail> {
        self.app.diff.detail()
    }

    /// Whether the diff's opened row is being computed.
    #[must_use]
    pub fn diff_detail_is_pending(self) -> bool {
        self.app.diff.detail_is_pending()
    }
}
