//! Reading the next shard ahead of a walk: while the walk evaluates shard N
//! (MLX copies its bytes out of the page cache), a named thread reads shard
//! N + 1 into the page cache, so the walk streams at about the speed the
//! files can be read instead of paying for the read and the copy one after
//! the other on one thread. Only the page cache holds what it reads: no
//! process memory, and nothing the walk's figures count.

use std::io::Read as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Bytes per read (what `cat` reads at a time, roughly).
const READ_BYTES: usize = 1 << 20;

/// A thread `shard-prefetch` that reads the shard after the one the walk
/// is in. Dropping it stops the thread before its next read.
pub struct Prefetcher {
    ahead: Option<mpsc::Sender<usize>>,
    stop: Arc<AtomicBool>,
    read_bytes: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Prefetcher {
    /// Starts the thread for shards `paths`, in walk order. `None` when the
    /// thread cannot be started (the walk then reads on its own).
    #[must_use]
    pub fn start(paths: Vec<PathBuf>) -> Option<Self> {
        let (ahead, wanted) = mpsc::channel::<usize>();
        let stop = Arc::new(AtomicBool::new(false));
        let read_bytes = Arc::new(AtomicUsize::new(0));
        let (stop_flag, counter) = (Arc::clone(&stop), Arc::clone(&read_bytes));
        let thread = std::thread::Builder::new()
            .name("shard-prefetch".into())
            .spawn(move || {
                let mut buf = vec![0u8; READ_BYTES];
                while let Ok(mut index) = wanted.recv() {
                    // Only the latest request matters once the walk moved on.
                    while let Ok(next) = wanted.try_recv() {
                        index = next;
                    }
                    let Some(path) = paths.get(index) else {
                        continue;
                    };
                    // A shard that cannot be read is the walk's to report.
                    let Ok(mut file) = std::fs::File::open(path) else {
                        continue;
                    };
                    while !stop_flag.load(Ordering::Relaxed) {
                        match file.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                counter.fetch_add(n, Ordering::Relaxed);
                            }
                        }
                    }
                    if stop_flag.load(Ordering::Relaxed) {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Self {
            ahead: Some(ahead),
            stop,
            read_bytes,
            thread: Some(thread),
        })
    }

    /// The walk entered shard `index`: read the one after it.
    pub fn entered(&self, index: usize) {
        if let Some(ahead) = &self.ahead {
            let _ = ahead.send(index + 1);
        }
    }

    /// Lets the thread finish what it was asked and returns the bytes it
    /// read ahead in all.
    #[must_use]
    pub fn finish(mut self) -> u64 {
        self.ahead = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.read_bytes.load(Ordering::Relaxed) as u64
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.ahead = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Prefetcher;

    #[test]
    fn reads_the_shard_after_the_one_entered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths: Vec<_> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("s{i}"));
                std::fs::write(&path, vec![7u8; 3 << 20 | i]).expect("write");
                path
            })
            .collect();
        let prefetcher = Prefetcher::start(paths.clone()).expect("thread");
        prefetcher.entered(0);
        assert_eq!(prefetcher.finish(), 3 << 20 | 1, "shard 1, whole");

        let prefetcher = Prefetcher::start(paths).expect("thread");
        prefetcher.entered(2); // past the last shard: nothing to read
        assert_eq!(prefetcher.finish(), 0);
        // Dropped at once: stops before its next read, never hangs.
        let prefetcher = Prefetcher::start(Vec::new()).expect("thread");
        prefetcher.entered(0);
        drop(prefetcher);
    }
}
