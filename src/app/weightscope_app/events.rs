//! The worker's and the recorder's events, applied to the panels.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::Checkpoint;
use crate::profile::Sampler;
use crate::weights::ViewInfo;
use crate::worker::{Event, EventKind, OpenedFacts};

use crate::app::background::RecorderEvent;
use crate::app::shards::ShardsPanel;
use crate::app::status_bar::StatusBar;
use crate::app::tensors::TensorsPanel;

use super::WeightscopeApp;

impl WeightscopeApp {
    /// Applies every waiting worker event, spending at most `budget`.
    pub fn drain_events(&mut self, budget: Duration) {
        let start = Instant::now();
        while let Some(sample) = self.sampler.as_ref().and_then(Sampler::try_recv) {
            self.timeline.push_sample(&sample);
            // The status bar's MLX figures move with the sampler too: during
            // a long materialization the worker sends nothing until it ends.
            if let Some(mlx) = sample.mlx {
                self.memory.active_bytes = mlx.active_bytes;
                self.memory.cache_bytes = mlx.cache_bytes;
                self.memory.peak_bytes = self.memory.peak_bytes.max(mlx.peak_bytes);
            }
        }
        while start.elapsed() < budget {
            let Some(event) = self.worker.try_recv() else {
                break;
            };
            self.apply(event);
        }
        while start.elapsed() < budget {
            let Some(event) = self
                .recorder
                .as_ref()
                .and_then(|r| r.events.try_recv().ok())
            else {
                break;
            };
            self.apply_recorder(event);
        }
    }

    pub(in crate::app) fn apply(&mut self, event: Event) {
        self.memory = event.memory;
        self.previews = event.previews;
        if let Some(mark) = &event.mark {
            self.timeline.push_event(mark, &event.sample);
            // One source for residency: the worker's bookkeeping, carried in
            // each mark (a second click on a tensor adds nothing).
            if let Some((file, bytes)) = &mark.resident {
                self.shards.resident(file, *bytes);
            }
        }
        match event.kind {
            EventKind::Opened {
                path,
                checkpoint,
                view,
                view_error,
                findings,
                facts,
            } => {
                self.check.opened(findings);
                let view_error = view_error.map(|e| e.to_string());
                self.apply_opened(&path, checkpoint, view, view_error, &facts);
            }
            EventKind::OpenProgress { path, step } => {
                if self.opening.as_ref() == Some(&path) {
                    self.open_step = Some(step);
                }
            }
            EventKind::OpenFailed { error, .. } => {
                self.opening = None;
                self.open_error = Some(error.to_string());
                // The field shows what is open, not the path that failed
                // (the error names that one).
                if self.checkpoint.is_some()
                    && let Some(open) = &self.opened_path
                {
                    self.path_input = open.display().to_string();
                }
            }
            EventKind::Materialized(preview) => self.inspector.materialized(preview),
            EventKind::Failed { job, target, error } => {
                if job == crate::worker::RequestKind::Walk {
                    self.profiler.walk_failed(&error.to_string());
                }
                self.inspector.worker_failed(&target, &error.to_string());
            }
            EventKind::ShardReleased { file, .. } => self.shards.resident(&file, 0),
            EventKind::ReleasedAll => self.shards.released_all(),
            EventKind::Closed => {
                self.checkpoint = None;
                self.shards = ShardsPanel::default();
                self.inspector.clear();
            }
            EventKind::WalkEnd(recorded) => {
                self.profiler.apply_walk_progress(&recorded, &self.timeline);
            }
            EventKind::WalkFinished(outcome) => {
                self.with_profiler(|profiler, inputs| {
                    profiler.apply_walk_finished(*outcome, inputs);
                });
            }
            EventKind::Diffed(progress) => self.diff.progress(progress),
            EventKind::DiffFinished(result) => self.diff.finished(result),
            EventKind::DiffDetail(name, result) => self.diff.detail_arrived(&name, result),
            EventKind::Scanned(progress) => self.check.progress(progress),
            EventKind::ScanFinished(result) => self.check.finished(result),
            EventKind::Released(_)
            | EventKind::Forgotten(_)
            | EventKind::PreviewsChanged
            | EventKind::CacheCleared { .. }
            | EventKind::MemoryLimitSet { .. }
            | EventKind::CacheLimitSet { .. } => {}
        }
    }

    pub(in crate::app) fn apply_opened(
        &mut self,
        path: &Path,
        checkpoint: Arc<Checkpoint>,
        view: Option<Arc<ViewInfo>>,
        view_error: Option<String>,
        facts: &OpenedFacts,
    ) {
        if let Some(error) = view_error {
            self.notice = Some(format!("view not installed: {error}"));
        }
        self.opening = None;
        self.opened_path = Some(path.to_path_buf());
        self.settings.remember(path);
        self.settings_dirty = true;
        self.path_input = path.display().to_string();
        // Panels whose state belongs to one checkpoint start afresh.
        self.shards = ShardsPanel::opened(&checkpoint);
        self.tensors = TensorsPanel::opened(&checkpoint, &facts.summary, view);
        self.status = StatusBar::opened(&facts.summary);
        self.inspector.clear();
        self.profiler
            .checkpoint_opened(facts.expected.clone(), facts.largest_shard_bytes);
        self.checkpoint = Some(checkpoint);
    }

    pub(in crate::app) fn apply_recorder(&mut self, event: RecorderEvent) {
        match event {
            RecorderEvent::Update(update) => self.profiler.recording_update(update),
            RecorderEvent::Finished(result) => {
                self.recorder = None;
                self.profiler.recording_finished(result);
            }
        }
    }
}
