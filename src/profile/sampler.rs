//! A named thread that samples process memory and MLX's counters on one
//! clock, into a bounded series.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The anonymous part of RSS (heap, MLX's CPU buffers); 0 where unknown.
    pub rss_anon_bytes: u64,
    /// The file-backed part of RSS (mapped files, the binary, shared memory).
    pub rss_file_bytes: u64,
    /// MLX's live arrays (on a GPU backend: device memory).
    pub mlx_active_bytes: u64,
    /// MLX's cache of freed buffers.
    pub mlx_cache_bytes: u64,
    /// MLX's highest active figure since its last reset.
    pub mlx_peak_bytes: u64,
}

impl MemorySample {
    /// A sample taken now, from the OS and MLX.
    #[must_use]
    pub fn now() -> Self {
        let process = ProcessMemory::read();
        let mlx = mlx::memory().unwrap_or_default();
        Self {
            at: Instant::now(),
            rss_bytes: process.rss_bytes,
            rss_anon_bytes: process.anon_bytes,
            rss_file_bytes: process.file_bytes,
            mlx_active_bytes: mlx.active_bytes,
            mlx_cache_bytes: mlx.cache_bytes,
            mlx_peak_bytes: mlx.peak_bytes,
        }
    }
}

/// This process's memory as the OS sees it, in bytes (0 where unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessMemory {
    /// Resident set size.
    pub rss_bytes: u64,
    /// Anonymous resident pages.
    pub anon_bytes: u64,
    /// File-backed and shared resident pages.
    pub file_bytes: u64,
    /// Highest RSS since start or the last [`reset_peak_rss`].
    pub peak_rss_bytes: u64,
}

impl ProcessMemory {
    /// Reads `/proc/self/status` on Linux: one small read, cheaper at 20 Hz
    /// than refreshing a process table, with the anonymous/file split that
    /// sysinfo does not give. Elsewhere, sysinfo's RSS alone.
    #[must_use]
    pub fn read() -> Self {
        #[cfg(target_os = "linux")]
        {
            std::fs::read_to_string("/proc/self/status")
                .map(|text| Self::parse_status(&text))
                .unwrap_or_default()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let rss = sysinfo_rss();
            Self {
                rss_bytes: rss,
                peak_rss_bytes: rss,
                ..Self::default()
            }
        }
    }

    /// The figures from the text of a Linux `/proc/PID/status` file.
    #[must_use]
    pub fn parse_status(text: &str) -> Self {
        let mut memory = Self::default();
        for line in text.lines() {
            let Some((key, rest)) = line.split_once(':') else {
                continue;
            };
            let field = match key {
                "VmRSS" => &mut memory.rss_bytes,
                "RssAnon" => &mut memory.anon_bytes,
                "RssFile" | "RssShmem" => &mut memory.file_bytes,
                "VmHWM" => &mut memory.peak_rss_bytes,
                _ => continue,
            };
            let kib = rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            *field += kib * 1024;
        }
        memory
    }
}

#[cfg(not(target_os = "linux"))]
fn sysinfo_rss() -> u64 {
    use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System};
    let Ok(pid) = sysinfo::get_current_pid() else {
        return 0;
    };
    let Ok(mut system) = System::new() else {
        return 0;
    };
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_memory(),
    );
    system.process(pid).map_or(0, sysinfo::Process::memory)
}

/// The process's resident set size, or 0 where it cannot be read.
#[must_use]
pub fn process_rss_bytes() -> u64 {
    ProcessMemory::read().rss_bytes
}

/// Starts a new peak-RSS measurement (Linux: writes `5` to
/// `/proc/self/clear_refs`, which resets `VmHWM`). Returns whether it could.
#[must_use]
pub fn reset_peak_rss() -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::write("/proc/self/clear_refs", "5").is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// This machine's memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MachineMemory {
    /// Installed RAM.
    pub total_bytes: u64,
    /// What the OS says new work can use now.
    pub available_bytes: u64,
}

impl MachineMemory {
    /// Reads the machine's memory through sysinfo.
    #[must_use]
    pub fn read() -> Self {
        let Ok(mut system) = sysinfo::System::new() else {
            return Self::default();
        };
        system.refresh_memory();
        Self {
            total_bytes: system.total_memory(),
            available_bytes: system.available_memory(),
        }
    }
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
    control: Option<SyncSender<Duration>>,
    samples: Receiver<MemorySample>,
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
        let (sample_tx, sample_rx) = mpsc::sync_channel::<MemorySample>(4096);
        let cost = Arc::new(SamplerCost::default());
        let thread_cost = Arc::clone(&cost);
        let thread = std::thread::Builder::new()
            .name("memory-sampler".into())
            .spawn(move || {
                let mut interval = interval.max(MIN_INTERVAL);
                let mut next = Instant::now();
                loop {
                    let began = Instant::now();
                    let sample = MemorySample::now();
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
    pub fn try_recv(&self) -> Option<MemorySample> {
        self.samples.try_recv().ok()
    }

    /// Waits for the next sample (tests and scripts; a UI uses [`Sampler::try_recv`]).
    #[must_use]
    pub fn recv(&self) -> Option<MemorySample> {
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
            series.push(MemorySample {
                at: start + Duration::from_millis(i),
                rss_bytes: i,
                rss_anon_bytes: 0,
                rss_file_bytes: 0,
                mlx_active_bytes: 0,
                mlx_cache_bytes: 0,
                mlx_peak_bytes: 0,
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
        assert!(
            first.rss_anon_bytes > 0 && first.rss_anon_bytes <= first.rss_bytes,
            "the anonymous part is a part"
        );
        assert!(sampler.samples_taken() >= 2);
        assert!(sampler.mean_sample_time() > Duration::ZERO);
        drop(sampler);
    }

    #[test]
    fn status_text_is_split_into_anonymous_and_file_pages() {
        let text = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 600 kB\n\
                    RssFile:\t 400 kB\nRssShmem:\t 24 kB\nbogus line\nVmSwap: x kB\n";
        let memory = ProcessMemory::parse_status(text);
        assert_eq!(memory.rss_bytes, 1024 * 1024);
        assert_eq!(memory.anon_bytes, 600 * 1024);
        assert_eq!(memory.file_bytes, 424 * 1024);
        assert_eq!(memory.peak_rss_bytes, 2048 * 1024);
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
