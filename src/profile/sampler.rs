//! A named thread that samples process memory and MLX's counters on one
//! clock, into a bounded series.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::mlx;

/// One sample, all figures in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySample {
    /// When it was taken.
    pub at: Instant,
    /// Process resident set size (from the OS: every page the process holds,
    /// MLX's buffers on the CPU backend included; not GPU memory).
    pub rss_bytes: u64,
    /// MLX's live arrays (on a GPU backend: device memory).
    pub mlx_active_bytes: u64,
    /// MLX's cache of freed buffers.
    pub mlx_cache_bytes: u64,
}

/// The process's resident set size, or 0 where it cannot be read.
///
/// Read from `/proc/self/status` (`VmRSS`, in kB) on Linux: one small read,
/// cheaper at 20 Hz than refreshing sysinfo's process table, and the same
/// file has the anonymous/file split the profiler will need. sysinfo stays
/// the plan for other systems.
#[must_use]
pub fn process_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Samples kept in order, oldest dropped past the capacity.
#[derive(Debug, Clone)]
pub struct Series {
    samples: VecDeque<MemorySample>,
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
    pub fn push(&mut self, sample: MemorySample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The samples, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &MemorySample> {
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
    pub fn last(&self) -> Option<&MemorySample> {
        self.samples.back()
    }
}

/// Handle to the sampler thread; dropping it stops the thread.
pub struct Sampler {
    stop: Option<SyncSender<()>>,
    samples: Receiver<MemorySample>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts the thread `memory-sampler`, taking a sample every `interval`
    /// and calling `wake` after each.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn spawn(interval: Duration, wake: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
        let (sample_tx, sample_rx) = mpsc::sync_channel::<MemorySample>(4096);
        let thread = std::thread::Builder::new()
            .name("memory-sampler".into())
            .spawn(move || {
                loop {
                    let memory = mlx::memory().unwrap_or_default();
                    let sample = MemorySample {
                        at: Instant::now(),
                        rss_bytes: process_rss_bytes(),
                        mlx_active_bytes: memory.active_bytes,
                        mlx_cache_bytes: memory.cache_bytes,
                    };
                    // A full queue means nobody drains: drop the sample, keep going.
                    if let Err(mpsc::TrySendError::Disconnected(_)) = sample_tx.try_send(sample) {
                        break;
                    }
                    wake();
                    // Waiting on the stop channel doubles as the sampling clock.
                    match stop_rx.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })?;
        Ok(Self {
            stop: Some(stop_tx),
            samples: sample_rx,
            thread: Some(thread),
        })
    }

    /// The next waiting sample, if any.
    #[must_use]
    pub fn try_recv(&self) -> Option<MemorySample> {
        self.samples.try_recv().ok()
    }

    /// Waits for the next sample (tests and scripts; a UI uses [`Sampler::try_recv`]).
    #[must_use]
    pub fn recv(&self) -> Option<MemorySample> {
        self.samples.recv().ok()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop = None; // disconnects: the thread leaves its wait at once
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
            series.push(MemorySample {
                at: start + Duration::from_millis(i),
                rss_bytes: i,
                mlx_active_bytes: 0,
                mlx_cache_bytes: 0,
            });
        }
        let kept: Vec<u64> = series.iter().map(|s| s.rss_bytes).collect();
        assert_eq!(kept, [2, 3, 4]);
        assert_eq!(series.last().map(|s| s.rss_bytes), Some(4));
    }

    #[test]
    fn the_sampler_reports_this_process_and_stops_on_drop() {
        let sampler = Sampler::spawn(Duration::from_millis(5), || {}).expect("spawn");
        let first = sampler.recv().expect("a sample");
        let second = sampler.recv().expect("another sample");
        assert!(
            first.rss_bytes > 1 << 20,
            "a running test holds more than 1 MiB"
        );
        assert!(second.at > first.at);
        drop(sampler);
    }
}
