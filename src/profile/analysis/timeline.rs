//! The session's memory timeline: every sample and event since the app
//! started, on one clock, bounded (hours at 20 Hz without growth).

use std::collections::VecDeque;
use std::time::Instant;

use crate::memory::{Mark, Sample, secs_since};
use crate::profile::trace::{Trace, TraceEvent};

/// Samples kept: 4 hours at 20 Hz (about 16 MB).
pub const TIMELINE_SAMPLES: usize = 4 * 3600 * 20;
/// Events kept (a walk of a 90k-tensor model records 90k steps).
pub const TIMELINE_EVENTS: usize = 250_000;

/// Samples and events since `origin`, oldest dropped past the caps.
#[derive(Debug, Clone)]
pub struct Timeline {
    origin: Instant,
    samples: VecDeque<Sample>,
    events: VecDeque<TraceEvent>,
    sample_cap: usize,
    event_cap: usize,
}

impl Timeline {
    /// An empty timeline whose clock starts at `origin`.
    #[must_use]
    pub fn new(origin: Instant) -> Self {
        Self::with_caps(origin, TIMELINE_SAMPLES, TIMELINE_EVENTS)
    }

    /// An empty timeline with other caps (tests).
    #[must_use]
    pub fn with_caps(origin: Instant, sample_cap: usize, event_cap: usize) -> Self {
        Self {
            origin,
            samples: VecDeque::new(),
            events: VecDeque::new(),
            sample_cap: sample_cap.max(1),
            event_cap: event_cap.max(1),
        }
    }

    /// The clock's zero.
    #[must_use]
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Seconds from the origin to `at`.
    #[must_use]
    pub fn secs(&self, at: Instant) -> f64 {
        secs_since(self.origin, at)
    }

    /// Adds a sample.
    pub fn push_sample(&mut self, sample: &Sample<Instant>) {
        if self.samples.len() == self.sample_cap {
            self.samples.pop_front();
        }
        let sample = sample.on_clock(self.origin);
        // Samples from the sampler thread and from events interleave; keep order.
        let at = self.samples.partition_point(|s| s.at <= sample.at);
        self.samples.insert(at, sample);
    }

    /// Adds an event with memory right after it (also kept as a sample).
    pub fn push_event(&mut self, mark: &Mark, memory: &Sample<Instant>) {
        if self.events.len() == self.event_cap {
            self.events.pop_front();
        }
        self.events
            .push_back(TraceEvent::new(mark, memory.at, self.origin, memory));
        self.push_sample(memory);
    }

    /// Samples, oldest first.
    #[must_use]
    pub fn samples(&self) -> &VecDeque<Sample> {
        &self.samples
    }

    /// Events, oldest first.
    #[must_use]
    pub fn events(&self) -> &VecDeque<TraceEvent> {
        &self.events
    }

    /// The newest sample.
    #[must_use]
    pub fn last_sample(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// The whole timeline as a trace.
    #[must_use]
    pub fn to_trace(&self, label: impl Into<String>) -> Trace {
        let mut trace = Trace::new(label);
        trace.samples = self.samples.iter().map(Sample::as_stored).collect();
        trace.events = self.events.iter().cloned().collect();
        trace
    }

    /// The part from `from_secs` to `to_secs` as a trace whose clock starts
    /// at `from_secs` (a walk, to study or to overlay on another).
    #[must_use]
    pub fn slice(&self, from_secs: f64, to_secs: f64, label: impl Into<String>) -> Trace {
        let mut trace = Trace::new(label);
        let inside = |t: f64| t >= from_secs && t <= to_secs;
        trace.samples = self
            .samples
            .iter()
            .filter(|s| inside(s.at))
            .map(|s| Sample {
                at: s.at - from_secs,
                ..s.as_stored()
            })
            .collect();
        trace.events = self
            .events
            .iter()
            .filter(|e| inside(e.t_secs))
            .map(|e| TraceEvent {
                t_secs: e.t_secs - from_secs,
                ..e.clone()
            })
            .collect();
        trace
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MarkKind, MlxFigures, ProcessFigures};
    use std::time::Duration;

    fn sample(origin: Instant, ms: u64, active: u64) -> Sample<Instant> {
        Sample {
            at: origin + Duration::from_millis(ms),
            process: ProcessFigures {
                rss_bytes: 1,
                anon_bytes: 1,
                ..ProcessFigures::default()
            },
            mlx: Some(MlxFigures {
                active_bytes: active,
                cache_bytes: 0,
                peak_bytes: active,
            }),
            gpu: None,
        }
    }

    #[test]
    fn bounded_ordered_and_sliced() {
        let origin = Instant::now();
        let mut timeline = Timeline::with_caps(origin, 4, 2);
        for ms in [0, 100, 300] {
            timeline.push_sample(&sample(origin, ms, ms));
        }
        // An event recorded between two sampler samples lands in order.
        timeline.push_event(
            &Mark::new(MarkKind::WalkStart, "retain"),
            &sample(origin, 200, 200),
        );
        timeline.push_event(
            &Mark::new(MarkKind::WalkStep, "a"),
            &sample(origin, 400, 400),
        );
        timeline.push_event(
            &Mark::new(MarkKind::WalkEnd, "retain"),
            &sample(origin, 500, 500),
        );
        let kept: Vec<u64> = timeline
            .samples()
            .iter()
            .map(|s| s.mlx_or_zero().active_bytes)
            .collect();
        assert_eq!(
            kept,
            [200, 300, 400, 500],
            "capped at 4, oldest gone, in time order"
        );
        assert_eq!(timeline.events().len(), 2, "events capped at 2");
        let walk = timeline.slice(0.4, 0.5, "walk");
        assert_eq!(walk.events.len(), 2);
        assert!(
            walk.events[0].t_secs.abs() < 1e-9,
            "the slice's clock starts at its start"
        );
        assert_eq!(walk.samples.len(), 2);
    }
}
