//! A named thread that samples process memory and MLX's counters on one
//! clock, into a bounded series.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::memory::Sample;

/// Samples kept in order, oldest dropped past the capacity.
#[derive(Debug, Clone)]
pub struct Series {
    samples: VecDeque<Sample<Instant>>,
    capacity: usize,
}

impl Series {
    /// An empty series holding at most `capacity` samples.
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            samples: VecDeque::with_capacity(capacity.min(1 << 16)),
            capacity: capacity.max(1),
        }
    }

    /// Adds a sample, dropping the oldest when full.
    pub fn push(&mut self, sample: Sample<Instant>) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The samples, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Sample<Instant>> {
        self.samples.iter()
    }

    /// How many samples are held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The newest sample.
    #[must_use]
    pub fn last(&self) -> Option<&Sample<Instant>> {
        self.samples.back()
    }
}

/// Handle to the sampler thread; dropping it stops the thread.
pub struct Sampler {
    control: Option<SyncSender<Duration>>,
    samples: Receiver<Sample<Instant>>,
    thread: Option<JoinHandle<()>>,
    cost: Arc<SamplerCost>,
}

/// What sampling costs, measured by the sampler on itself.
#[derive(Debug, Default)]
struct SamplerCost {
    /// Nanoseconds spent taking samples.
    busy_nanos: AtomicU64,
    /// Samples taken.
    count: AtomicU64,
}

/// The sampler's default rate: 20 samples a second.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);

impl Sampler {
    /// Starts the thread `memory-sampler`, taking a sample every `interval`
    /// and calling `wake` after each.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(interval: Duration, wake: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let (control_tx, control_rx) = mpsc::sync_channel::<Duration>(4);
        let (sample_tx, sample_rx) = mpsc::sync_channel::<Sample<Instant>>(4096);
        let cost = Arc::new(SamplerCost::default());
        let thread_cost = Arc::clone(&cost);
        let thread = std::thread::Builder::new()
            .name("memory-sampler".into())
            .spawn(move || {
                let mut interval = interval.max(MIN_INTERVAL);
                let mut next = Instant::now();
                loop {
                    let began = Instant::now();
                    let sample = crate::mlx::sample_now();
                    let spent = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    thread_cost.busy_nanos.fetch_add(spent, Ordering::Relaxed);
                    thread_cost.count.fetch_add(1, Ordering::Relaxed);
                    // A full queue means nobody drains: drop the sample, keep going.
                    if let Err(mpsc::TrySendError::Disconnected(_)) = sample_tx.try_send(sample) {
                        break;
                    }
                    wake();
                    // Waiting on the control channel doubles as the sampling
                    // clock; a new interval applies from the next sample.
                    next += interval;
                    let wait = next.saturating_duration_since(Instant::now());
                    match control_rx.recv_timeout(wait) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(new_interval) => {
                            interval = new_interval.max(MIN_INTERVAL);
                            next = Instant::now();
                        }
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    // After a stall (a suspended machine), do not burst to catch up.
                    if next + interval < Instant::now() {
                        next = Instant::now();
                    }
                }
            })?;
        Ok(Self {
            control: Some(control_tx),
            samples: sample_rx,
            thread: Some(thread),
            cost,
        })
    }

    /// Changes the sampling interval (at least 1 ms).
    pub fn set_interval(&self, interval: Duration) {
        if let Some(control) = &self.control {
            let _ = control.try_send(interval);
        }
    }

    /// The next waiting sample, if any.
    #[must_use]
    pub fn try_recv(&self) -> Option<Sample<Instant>> {
        self.samples.try_recv().ok()
    }

    /// Waits for the next sample (tests and scripts; a UI uses [`Sampler::try_recv`]).
    #[must_use]
    pub fn recv(&self) -> Option<Sample<Instant>> {
        self.samples.recv().ok()
    }

    /// Samples taken so far.
    #[must_use]
    pub fn samples_taken(&self) -> u64 {
        self.cost.count.load(Ordering::Relaxed)
    }

    /// Mean time one sample takes (reading `/proc` and MLX's counters).
    #[must_use]
    pub fn mean_sample_time(&self) -> Duration {
        let count = self.cost.count.load(Ordering::Relaxed).max(1);
        Duration::from_nanos(self.cost.busy_nanos.load(Ordering::Relaxed) / count)
    }

    /// The share of one core that sampling every `interval` costs, in percent
    /// (mean time per sample over the interval; wall time, so an upper bound).
    #[must_use]
    pub fn cost_percent(&self, interval: Duration) -> f64 {
        100.0 * self.mean_sample_time().as_secs_f64() / interval.as_secs_f64().max(1e-6)
    }
}

/// The shortest interval the sampler accepts.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

impl Drop for Sampler {
    fn drop(&mut self) {
        self.control = None; // disconnects: the thread leaves its wait at once
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_is_bounded_and_ordered() {
        let start = Instant::now();
        let mut series = Series::new(3);
        for i in 0..5u64 {
            series.push(Sample {
                at: start + Duration::from_millis(i),
                process: crate::memory::ProcessFigures {
                    rss_bytes: i,
                    ..Default::default()
                },
                mlx: None,
                gpu: None,
            });
        }
        let kept: Vec<u64> = series.iter().map(|s| s.process.rss_bytes).collect();
        assert_eq!(kept, [2, 3, 4]);
        assert_eq!(series.last().map(|s| s.process.rss_bytes), Some(4));
    }

    #[test]
    fn the_sampler_reports_this_process_and_stops_on_drop() {
        let sampler = Sampler::spawn(Duration::from_millis(5), || {}).expect("spawn");
        let first = sampler.recv().expect("a sample");
        let second = sampler.recv().expect("another sample");
        assert!(
            first.process.rss_bytes > 1 << 20,
            "a running test holds more than 1 MiB"
        );
        assert!(second.at > first.at);
        assert!(
            first.process.anon_bytes > 0 && first.process.anon_bytes <= first.process.rss_bytes,
            "the anonymous part is a part"
        );
        assert!(sampler.samples_taken() >= 2);
        assert!(sampler.mean_sample_time() > Duration::ZERO);
        drop(sampler);
    }

    #[test]
    fn the_interval_can_change_while_running() {
        let sampler = Sampler::spawn(Duration::from_hours(1), || {}).expect("spawn");
        let _ = sampler.recv().expect("the first sample comes at once");
        sampler.set_interval(Duration::from_millis(1));
        // Without the change the next sample would be an hour away.
        let _ = sampler.recv().expect("a sample at the new rate");
    }
}
