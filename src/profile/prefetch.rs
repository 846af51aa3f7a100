//! Streaming a walk's shards from disk as `cat` would: a named thread reads
//! the shards in walk order, front to back, into the page cache, at most one
//! shard ahead of the walk, and the walk waits before each tensor until that
//! reader is past the tensor's last byte ([`Prefetcher::wait_for`]). MLX then
//! copies out of the page cache while the disk serves one sequential stream,
//! and the read of what comes next overlaps MLX's copy of what is here.
//!
//! Why the walk waits: without it, the walk's own reads (MLX's, a tensor at a
//! time) caught up with the reader in the same file and the two streams read
//! slower than one (three shards of real bytes here: the last shard at
//! 0.75 GB/s against 2.2 GB/s for the first two). Only the page cache holds
//! what the thread reads: no process memory, nothing the walk's figures count.

use std::io::Read as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes per read (what `cat` reads at a time, roughly).
const READ_BYTES: usize = 1 << 20;

/// How often a waiting walk looks at its cancel token.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// A thread `shard-prefetch` that reads a walk's shards ahead of it. Dropping
/// it stops the thread before its next read.
pub struct Prefetcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// Where the walk and the reader are; shards are walk positions.
#[derive(Default)]
struct State {
    /// The shard the walk is in.
    walk: usize,
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
}

impl Prefetcher {
    /// Starts the thread for shards `paths`, in walk order; it begins with
    /// the first at once. `None` when the thread cannot be started (the walk
    /// then reads on its own, and [`Self::wait_for`] is never called).
    #[must_use]
    pub fn start(paths: Vec<PathBuf>) -> Option<Self> {
        let shared = Arc::new(Shared {
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

    /// The walk entered shard `position`: the reader may go on to the one
    /// after it.
    pub fn entered(&self, position: usize) {
        self.shared.lock().walk = position;
        self.shared.changed.notify_all();
    }

    /// Blocks until the reader is past byte `end` of shard `position`'s file
    /// (or done with that shard, or stopped), or until `cancel` is set.
    pub fn wait_for(&self, position: usize, end: u64, cancel: &AtomicBool) {
        let mut state = self.shared.lock();
        while !(state.done
            || state.reading > position
            || (state.reading == position && state.read_to >= end))
        {
            if cancel.load(Ordering::Relaxed) {
                return;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, CANCEL_POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Lets the thread read what the walk's position allows, stops it, and
    /// returns the bytes it read in all.
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

/// The thread: each shard front to back, never more than one shard ahead
/// of the walk.
fn read_shards(paths: &[PathBuf], shared: &Shared) {
    let mut buf = vec![0u8; READ_BYTES];
    'shards: for (position, path) in paths.iter().enumerate() {
        {
            let mut state = shared.lock();
            while position > state.walk + 1 && !state.stop && !state.finishing {
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if state.stop || (state.finishing && position > state.walk + 1) {
                break;
            }
            state.reading = position;
            state.read_to = 0;
        }
        shared.changed.notify_all();
        // A shard that cannot be read is the walk's to report.
        if let Ok(mut file) = std::fs::File::open(path) {
            while let Ok(n @ 1..) = file.read(&mut buf) {
                let mut state = shared.lock();
                if state.stop {
                    break 'shards;
                }
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
    fn reads_from_the_first_shard_and_one_ahead_of_the_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = shards(dir.path(), 4);
        let prefetcher = Prefetcher::start(paths.clone()).expect("thread");
        prefetcher.entered(1);
        assert_eq!(
            prefetcher.finish(),
            3 * (3 << 20) + 1 + 2,
            "shards 0, 1 and 2 whole, not 3"
        );

        let prefetcher = Prefetcher::start(paths).expect("thread");
        // Past the last shard: everything is read, nothing more waited for.
        prefetcher.entered(7);
        assert_eq!(prefetcher.finish(), 4 * (3 << 20) + 1 + 2 + 3);
        // Dropped at once: stops before its next read, never hangs.
        let prefetcher = Prefetcher::start(Vec::new()).expect("thread");
        prefetcher.entered(0);
        drop(prefetcher);
    }

    #[test]
    fn the_walk_waits_until_the_bytes_are_read_and_never_for_a_missing_shard() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut paths = shards(dir.path(), 2);
        paths.insert(1, dir.path().join("missing"));
        let prefetcher = Prefetcher::start(paths).expect("thread");
        let cancel = AtomicBool::new(false);
        prefetcher.wait_for(0, 3 << 20, &cancel);
        assert!(prefetcher.shared.lock().read_bytes >= 3 << 20);
        prefetcher.entered(1);
        prefetcher.wait_for(1, 10, &cancel); // cannot be opened: not waited for
        prefetcher.entered(2);
        prefetcher.wait_for(2, (3 << 20) + 1, &cancel);
        assert_eq!(prefetcher.shared.lock().read_bytes, 2 * (3 << 20) + 1);
        // Beyond the end of a file: the wait ends when the shard is read.
        prefetcher.wait_for(2, u64::MAX - 1, &cancel);
    }

    #[test]
    fn a_cancelled_walk_stops_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = shards(dir.path(), 3);
        let prefetcher = Prefetcher::start(paths).expect("thread");
        // The walk is in shard 0, so shard 2 is never read: only the cancel
        // token can end this wait.
        let cancel = AtomicBool::new(true);
        prefetcher.wait_for(2, 1, &cancel);
    }
}
