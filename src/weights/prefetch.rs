//! Streaming a walk's shards from disk as `cat` would: a named thread reads
//! the shards in walk order, front to back, into the page cache, never more
//! than [`LEAD_BYTES`] past what the walk has asked for, and the walk waits
//! before each tensor until that reader is past the tensor's last byte
//! ([`Prefetcher::wait_for`]). MLX then copies out of the page cache while
//! the disk serves one sequential stream, and the read of what comes next
//! overlaps MLX's copy of what is here.
//!
//! Why the walk waits: without it, the walk's own reads (MLX's, a tensor at a
//! time) caught up with the reader in the same file and the two streams read
//! slower than one (three shards of real bytes here: the last shard at
//! 0.75 GB/s against 2.2 GB/s for the first two). Why the lead is bounded: a
//! reader far ahead of a slow walk (a quantizing one, a checkpoint in one
//! 30 GB file) would fill the page cache and lose the pages the walk needs
//! next. Only the page cache holds what the thread reads: no process memory,
//! nothing the walk's figures count.

use std::io::Read as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes per read (what `cat` reads at a time, roughly).
const READ_BYTES: usize = 1 << 20;

/// How far the reader may go past the last byte the walk asked for.
pub const LEAD_BYTES: u64 = 1 << 30;

/// How often a waiting walk looks at its cancel token.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// A thread `shard-prefetch` that reads a walk's shards ahead of it. Dropping
/// it stops the thread before its next read.
pub struct Prefetcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Where each shard starts in the walk's stream of bytes (the files one
    /// after the other), and where the last one ends.
    starts: Vec<u64>,
    lead_bytes: u64,
    state: Mutex<State>,
    changed: Condvar,
}

/// How far the walk and the reader are; shards are walk positions.
#[derive(Default)]
struct State {
    /// The furthest byte of the stream the walk has asked for.
    wanted: u64,
    /// The shard being read, and how far into the file (`u64::MAX` once it
    /// is read, or could not be: the walk then reports the error itself).
    reading: usize,
    read_to: u64,
    /// Every shard read, or the thread stopped.
    done: bool,
    /// Stop before the next read (dropped).
    stop: bool,
    /// Stop instead of waiting for the walk ([`Prefetcher::finish`]).
    finishing: bool,
    /// Bytes read in all.
    read_bytes: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means the other side panicked; the numbers
        // in it are still whole.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where byte `offset` of shard `position`'s file is in the stream.
    fn stream_offset(&self, position: usize, offset: u64) -> u64 {
        let (Some(start), Some(end)) = (self.starts.get(position), self.starts.get(position + 1))
        else {
            return self.starts.last().copied().unwrap_or(0);
        };
        start + offset.min(end - start)
    }

    /// How far into the stream the reader is.
    fn read_through(&self, state: &State) -> u64 {
        self.stream_offset(state.reading, state.read_to)
    }

    /// Whether the reader is as far as the lead lets it go.
    fn far_enough(&self, state: &State) -> bool {
        self.read_through(state) >= state.wanted.saturating_add(self.lead_bytes)
    }
}

impl Prefetcher {
    /// Starts the thread for shards `paths`, in walk order; it begins with
    /// the first at once. `None` when the thread cannot be started (the walk
    /// then reads on its own).
    #[must_use]
    pub fn start(paths: Vec<PathBuf>) -> Option<Self> {
        Self::with_lead(paths, LEAD_BYTES)
    }

    fn with_lead(paths: Vec<PathBuf>, lead_bytes: u64) -> Option<Self> {
        // A file that cannot be looked at counts as empty: nothing is
        // waited for, and the walk reports it.
        let mut starts = Vec::with_capacity(paths.len() + 1);
        let mut at = 0u64;
        starts.push(at);
        for path in &paths {
            at = at.saturating_add(std::fs::metadata(path).map_or(0, |m| m.len()));
            starts.push(at);
        }
        let shared = Arc::new(Shared {
            starts,
            lead_bytes,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let reader = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("shard-prefetch".into())
            .spawn(move || read_shards(&paths, &reader))
            .ok()?;
        Some(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Blocks until the reader is past byte `end` of shard `position`'s file
    /// (or done with that shard, or stopped), or until `cancel` is set; the
    /// reader may then go on to [`LEAD_BYTES`] past it. Returns how long it
    /// blocked.
    pub fn wait_for(&self, position: usize, end: u64, cancel: &AtomicBool) -> Duration {
        let target = self.shared.stream_offset(position, end);
        let mut state = self.shared.lock();
        if target > state.wanted {
            state.wanted = target;
            self.shared.changed.notify_all();
        }
        let started = Instant::now();
        // Past shard `position` counts too: stream offsets only grow.
        while !(state.done || self.shared.read_through(&state) >= target) {
            if cancel.load(Ordering::Relaxed) {
                break;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, CANCEL_POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        started.elapsed()
    }

    /// Lets the thread read what the walk's requests allow, stops it, and
    /// returns the bytes it read in all (the tests' measure).
    #[cfg(test)]
    #[must_use]
    pub fn finish(mut self) -> u64 {
        self.shared.lock().finishing = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.shared.lock().read_bytes
    }
}

/// The thread: each shard front to back, never more than the lead past
/// what the walk asked for.
fn read_shards(paths: &[PathBuf], shared: &Shared) {
    let mut buf = vec![0u8; READ_BYTES];
    'shards: for (position, path) in paths.iter().enumerate() {
        {
            let mut state = shared.lock();
            state.reading = position;
            state.read_to = 0;
        }
        shared.changed.notify_all();
        // A shard that cannot be read is the walk's to report.
        if let Ok((mut file, _)) = crate::files::open_regular(path) {
            loop {
                {
                    let mut state = shared.lock();
                    while !state.stop && !state.finishing && shared.far_enough(&state) {
                        state = shared
                            .changed
                            .wait(state)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    if state.stop || shared.far_enough(&state) {
                        break 'shards;
                    }
                }
                let Ok(n @ 1..) = file.read(&mut buf) else {
                    break;
                };
                let mut state = shared.lock();
                state.read_to += n as u64;
                state.read_bytes += n as u64;
                drop(state);
                shared.changed.notify_all();
            }
        }
        shared.lock().read_to = u64::MAX;
        shared.changed.notify_all();
    }
    shared.lock().done = true;
    shared.changed.notify_all();
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Prefetcher;
    use std::sync::atomic::AtomicBool;

    const MIB: u64 = 1 << 20;

    fn shards(dir: &std::path::Path, count: usize) -> Vec<std::path::PathBuf> {
        (0..count)
            .map(|i| {
                let path = dir.join(format!("s{i}"));
                std::fs::write(&path, vec![7u8; 3 << 20 | i]).expect("write");
                path
            })
            .collect()
    }

    #[test]
    fn reads_no_further_than_the_lead_past_what_the_walk_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = shards(dir.path(), 4);
        let cancel = AtomicBool::new(false);
        // Asked for nothing yet: the lead alone, across a shard's end.
        let prefetcher = Prefetcher::with_lead(paths.clone(), 4 * MIB).expect("thread");
        assert_eq!(prefetcher.finish(), 4 * MIB);

        let prefetcher = Prefetcher::with_lead(paths.clone(), 2 * MIB).expect("thread");
        prefetcher.wait_for(1, MIB, &cancel);
        // Shard 0 (3 MiB), 1 MiB of shard 1, and the lead.
        assert_eq!(prefetcher.finish(), 6 * MIB);

        let prefetcher = Prefetcher::with_lead(paths, 2 * MIB).expect("thread");
        prefetcher.wait_for(3, u64::MAX, &cancel);
        assert_eq!(prefetcher.finish(), 12 * MIB + 1 + 2 + 3, "everything");
        // Dropped at once: stops before its next read, never hangs.
        let prefetcher = Prefetcher::start(Vec::new()).expect("thread");
        drop(prefetcher);
    }

    #[test]
    fn the_walk_waits_until_the_bytes_are_read_and_never_for_a_missing_shard() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut paths = shards(dir.path(), 2);
        paths.insert(1, dir.path().join("missing"));
        let prefetcher = Prefetcher::with_lead(paths, MIB).expect("thread");
        let cancel = AtomicBool::new(false);
        prefetcher.wait_for(0, 3 * MIB, &cancel);
        assert!(prefetcher.shared.lock().read_bytes >= 3 * MIB);
        prefetcher.wait_for(1, 10, &cancel); // cannot be opened: not waited for
        prefetcher.wait_for(2, 3 * MIB + 1, &cancel);
        assert!(prefetcher.shared.lock().read_bytes > 6 * MIB);
        // Beyond the end of a file: the wait ends when the shard is read.
        prefetcher.wait_for(2, u64::MAX - 1, &cancel);
        assert_eq!(prefetcher.finish(), 6 * MIB + 1);
    }

    #[test]
    fn a_cancelled_walk_stops_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = shards(dir.path(), 3);
        let prefetcher = Prefetcher::with_lead(paths, MIB).expect("thread");
        // Cancelled before it asks: the wait ends whatever was read.
        let cancel = AtomicBool::new(true);
        prefetcher.wait_for(2, 1, &cancel);
    }
}
