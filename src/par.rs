//! The one way weightscope runs work on several cores: [`on_workers`]
//! starts named scoped threads, lets the calling thread do its own part
//! meanwhile, and joins them. Every parallel step (index checks and
//! summaries cut into one run per core, header parsing from a shared queue,
//! `inspect`'s ordered output) is built on it. A thread that cannot start,
//! or that panics (a bug), gives `None`: its caller does that part itself,
//! so a machine out of threads is slower, never wrong.
#![forbid(unsafe_code)]

use std::num::NonZero;

/// The cores to spread work over (1 where the OS cannot say), asked once:
/// the answer reads the process's cgroup files each time (a tenth of a
/// millisecond), and `inspect` asks at every parallel step.
#[must_use]
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, NonZero::get))
}

/// Runs `worker(k)` for `k` in `0..count`, each on its own scoped thread
/// named `name`, while `main(started)` runs on the calling thread (told how
/// many workers started); returns each worker's result in order (`None`
/// for one that could not start or panicked) and `main`'s.
pub fn on_workers<R: Send, M>(
    count: usize,
    name: &str,
    worker: &(dyn Fn(usize) -> R + Sync),
    main: impl FnOnce(usize) -> M,
) -> (Vec<Option<R>>, M) {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .map(|k| {
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn_scoped(scope, move || worker(k))
                    .ok()
            })
            .collect();
        let main = main(handles.iter().flatten().count());
        let results = handles
            .into_iter()
            .map(|handle| handle.and_then(|h| h.join().ok()))
            .collect();
        (results, main)
    })
}

/// `work` over `0..len` cut into one run per core (runs of at least
/// `at_least` items), each run on a thread named `name`, the results in
/// order. A run whose thread cannot start is done on the calling thread.
pub fn on_cores<T: Send>(
    len: usize,
    at_least: usize,
    name: &str,
    work: &(dyn Fn(std::ops::Range<usize>) -> T + Sync),
) -> Vec<T> {
    let step = len.div_ceil(cores()).max(at_least).max(1);
    let ranges: Vec<std::ops::Range<usize>> = (0..len)
        .step_by(step)
        .map(|start| start..(start + step).min(len))
        .collect();
    if ranges.len() <= 1 {
        return ranges.into_iter().map(work).collect();
    }
    let (results, ()) = on_workers(ranges.len(), name, &|k| work(ranges[k].clone()), |_| ());
    results
        .into_iter()
        .zip(&ranges)
        .map(|(result, range)| result.unwrap_or_else(|| work(range.clone())))
        .collect()
}

/// `items` sorted by `key` (stable: equal keys keep their order), one run
/// per core sorted on its own thread (each key read once per item, as
/// `sort_by_cached_key` does), then the runs merged. For the window's 90k
/// rows, whose string comparisons dominate a sort.
pub fn sort_by_key<K: Ord + Send>(items: &mut Vec<usize>, key: &(dyn Fn(usize) -> K + Sync)) {
    let len = items.len();
    if len < 4096 || cores() < 2 {
        items.sort_by_cached_key(|&i| key(i));
        return;
    }
    let source: &[usize] = items;
    let runs: Vec<Vec<(K, usize)>> = on_cores(len, 4096, "sort-run", &|range| {
        let mut run: Vec<(K, usize)> = source[range].iter().map(|&i| (key(i), i)).collect();
        // Stable within the run; runs are merged in order below.
        run.sort_by(|a, b| a.0.cmp(&b.0));
        run
    });
    let mut at = vec![0usize; runs.len()];
    items.clear();
    loop {
        // The first run (in order) holding the smallest key: stable.
        let mut best: Option<usize> = None;
        for (k, run) in runs.iter().enumerate() {
            let Some((candidate, _)) = run.get(at[k]) else {
                continue;
            };
            if best.is_none_or(|b| candidate < &runs[b][at[b]].0) {
                best = Some(k);
            }
        }
        let Some(b) = best else { break };
        items.push(runs[b][at[b]].1);
        at[b] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_in_order_and_cover_everything() {
        let sums = on_cores(1000, 10, "test-run", &|range| range.sum::<usize>());
        assert_eq!(sums.iter().sum::<usize>(), (0..1000).sum::<usize>());
        assert!(!sums.is_empty());
        let (results, started) = on_workers(3, "test-worker", &|k| k * 2, |started| started);
        assert_eq!(results, [Some(0), Some(2), Some(4)]);
        // A sort in runs merged keeps equal keys in their order (stable),
        // as the one-thread sort does.
        let mut items: Vec<usize> = (0..20_000).collect();
        let key = |i: usize| (i * 7919) % 101;
        sort_by_key(&mut items, &key);
        let mut want: Vec<usize> = (0..20_000).collect();
        want.sort_by_key(|&i| key(i));
        assert_eq!(items, want);
        assert_eq!(started, 3);
    }

    #[test]
    fn a_worker_that_panics_gives_none() {
        let (results, ()) = on_workers(
            2,
            "test-panic",
            &|k| {
                assert!(k != 1, "a bug in worker 1");
                k
            },
            |_| (),
        );
        assert_eq!(results, [Some(0), None]);
    }
}
