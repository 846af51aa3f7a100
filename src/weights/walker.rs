//! The walker: the one loop that goes through a checkpoint's tensors in
//! order, for every job that reads a whole model (the profiler's walk, the
//! value scan of `check --values`, the diff of two checkpoints).
//!
//! It owns what those jobs share: starting from nothing (everything
//! released, MLX's cache cleared, peaks reset), the release policy, waits
//! for the shard prefetcher, cancel, progress and peak tracking. What a job
//! does with each tensor is a [`Visitor`]; a new whole-model job is one more
//! visitor. It walks one checkpoint ([`Weights`]) or two in step ([`InStep`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::checkpoint::{Checkpoint, ShardId, TensorRef};
use crate::memory::{ProcessFigures, Sample, reset_peak_rss};
use crate::mlx;

use super::prefetch::Prefetcher;
use super::{ShardLoader, Weights, WeightsError};

/// What the walker lets go of, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Nothing until the end.
    Nothing,
    /// Each tensor's cached array after its visit; the shards' maps stay
    /// (and with them every byte read: the trap of streaming jobs).
    Tensor,
    /// Each tensor's cached array after its visit, and each shard (its map
    /// and arrays) once no tensor left to visit needs it.
    Shard,
}

/// What the walker released, told to the visitor right after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released<'a> {
    /// A tensor's cached array ([`Release::Tensor`] only).
    Tensor(&'a str),
    /// Shard `shard` of side `side` (0, or 1 for a pair's B), which held
    /// `freed` bytes by the core's bookkeeping.
    Shard {
        /// The side: 0 (A), 1 (B).
        side: usize,
        /// The shard, of that side's checkpoint.
        shard: ShardId,
        /// Bytes it held.
        freed: u64,
    },
}

/// Progress of a walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Tensors visited.
    pub done: usize,
    /// Tensors to visit.
    pub total: usize,
    /// The tensor just visited.
    pub name: String,
}

/// The walk in progress, as a visitor sees it: counts, and memory samples
/// that count toward the walk's peaks.
#[derive(Debug)]
pub struct WalkProgress {
    done: usize,
    total: usize,
    highest_rss: u64,
    highest_active: u64,
    sampled: bool,
}

impl WalkProgress {
    /// Tensors visited so far.
    #[must_use]
    pub fn done(&self) -> usize {
        self.done
    }

    /// Tensors to visit.
    #[must_use]
    pub fn total(&self) -> usize {
        self.total
    }

    /// Memory now, counted toward the walk's peaks.
    pub fn sample(&mut self) -> Sample<Instant> {
        let sample = crate::mlx::sample_now();
        self.highest_rss = self.highest_rss.max(sample.process.rss_bytes);
        self.highest_active = self.highest_active.max(sample.mlx_or_zero().active_bytes);
        self.sampled = true;
        sample
    }
}

impl WalkProgress {
    /// MLX's peak active memory and the process's peak RSS over the walk:
    /// the counters where they were reset when it began (never below what
    /// was sampled), else the highest sampled.
    fn peaks(&self, mlx_reset: bool, rss_reset: bool) -> (u64, u64) {
        let mlx = match mlx::memory() {
            Ok(m) if mlx_reset => m.peak_bytes.max(self.highest_active),
            _ => self.highest_active,
        };
        let rss = if rss_reset {
            ProcessFigures::read().peak_rss_bytes.max(self.highest_rss)
        } else {
            self.highest_rss
        };
        (mlx, rss)
    }
}

/// How a walk went.
#[derive(Debug)]
pub struct Walked {
    /// Tensors visited.
    pub done: usize,
    /// Tensors to visit.
    pub total: usize,
    /// Whether the cancel flag stopped it.
    pub cancelled: bool,
    /// The tensor whose visit stopped the walk, and why.
    pub stopped: Option<(String, WeightsError)>,
    /// MLX's peak active memory over the walk (its counter, reset when the
    /// walk began; where it cannot be reset, the highest sampled).
    pub peak_mlx_active_bytes: u64,
    /// The process's peak RSS over the walk (`VmHWM`, reset when it began,
    /// where the OS allows; else the highest sampled).
    pub peak_rss_bytes: u64,
    /// Time spent waiting for the prefetcher to read shards' bytes.
    pub read_wait: Duration,
    /// Wall time.
    pub elapsed: Duration,
}

/// What a whole-model job does with each tensor. Every method but `visit`
/// has a default that does nothing.
pub trait Visitor<S: ?Sized> {
    /// Before the first tensor, with everything released.
    fn begin(&mut self, _sides: &mut S, _walking: &mut WalkProgress) {}

    /// Before the prefetcher is waited on for `name`: an error stops the
    /// walk before its bytes are streamed from disk.
    ///
    /// # Errors
    /// Whatever the visitor refuses `name` for.
    fn ready(
        &mut self,
        _sides: &mut S,
        _name: &str,
        _walking: &mut WalkProgress,
    ) -> Result<(), WeightsError> {
        Ok(())
    }

    /// Visits one tensor. An error stops the walk; a job that goes on past
    /// a failed tensor notes it and returns `Ok`.
    ///
    /// # Errors
    /// What stops the walk.
    fn visit(
        &mut self,
        sides: &mut S,
        name: &str,
        walking: &mut WalkProgress,
    ) -> Result<(), WeightsError>;

    /// After the walker released something (see [`Released`]).
    fn released(&mut self, _sides: &mut S, _what: Released<'_>, _walking: &mut WalkProgress) {}

    /// The walk is leaving shard `shard` of the first side (the next tensor
    /// is in another, or there is none), before that shard is released.
    fn leaving(&mut self, _sides: &mut S, _shard: ShardId) {}
}

/// What the walker walks: one checkpoint, or two in step.
pub trait Walkable {
    /// Drops every cached array and map.
    fn release_all(&mut self);
    /// Drops the cached array of `name` on every side.
    fn release(&mut self, name: &str);
    /// `(side, shard)` of every stored tensor a visit of `name` reads: the
    /// tensor, and with `parts` its scales, biases and block scales.
    fn needs(&self, name: &str, parts: bool, out: &mut Vec<(usize, ShardId)>);
    /// Releases shard `shard` of side `side`; returns the bytes it held.
    fn release_shard(&mut self, side: usize, shard: ShardId) -> u64;
    /// The first side's checkpoint.
    fn checkpoint(&self) -> &Checkpoint;
    /// The first side's header entry for `name`.
    fn info(&self, name: &str) -> Option<TensorRef<'_>>;
}

impl<N: ShardLoader> Walkable for Weights<N> {
    fn release_all(&mut self) {
        Weights::release_all(self);
    }

    fn release(&mut self, name: &str) {
        Weights::release(self, name);
    }

    fn needs(&self, name: &str, parts: bool, out: &mut Vec<(usize, ShardId)>) {
        if parts {
            for stored in self.stored_parts(name) {
                if let Some(t) = self.checkpoint().tensor(&stored) {
                    out.push((0, t.shard()));
                }
            }
        } else if let Some(t) = Weights::info(self, name) {
            out.push((0, t.shard()));
        }
    }

    fn release_shard(&mut self, _side: usize, shard: ShardId) -> u64 {
        Weights::release_shard(self, shard)
    }

    fn checkpoint(&self) -> &Checkpoint {
        Weights::checkpoint(self)
    }

    fn info(&self, name: &str) -> Option<TensorRef<'_>> {
        Weights::info(self, name)
    }
}

/// Two checkpoints walked in step (the diff): side 0 is `a`, side 1 `b`.
pub struct InStep<'a, N: ShardLoader, M: ShardLoader> {
    /// Side A.
    pub a: &'a mut Weights<N>,
    /// Side B.
    pub b: &'a mut Weights<M>,
}

impl<N: ShardLoader, M: ShardLoader> Walkable for InStep<'_, N, M> {
    fn release_all(&mut self) {
        self.a.release_all();
        self.b.release_all();
    }

    fn release(&mut self, name: &str) {
        self.a.release(name);
        self.b.release(name);
    }

    fn needs(&self, name: &str, parts: bool, out: &mut Vec<(usize, ShardId)>) {
        Walkable::needs(&*self.a, name, parts, out);
        let from = out.len();
        Walkable::needs(&*self.b, name, parts, out);
        for need in &mut out[from..] {
            need.0 = 1;
        }
    }

    fn release_shard(&mut self, side: usize, shard: ShardId) -> u64 {
        if side == 0 {
            Walkable::release_shard(&mut *self.a, 0, shard)
        } else {
            Walkable::release_shard(&mut *self.b, 0, shard)
        }
    }

    fn checkpoint(&self) -> &Checkpoint {
        self.a.checkpoint()
    }

    fn info(&self, name: &str) -> Option<TensorRef<'_>> {
        self.a.info(name)
    }
}

/// Why the loop stopped, or that it goes on (`Finished` after a tensor).
enum End {
    Finished,
    Cancelled,
    Stopped(String, WeightsError),
}

/// One walk: the tensors, in order, and how to go through them.
pub struct Walker<'c> {
    names: Vec<String>,
    release: Release,
    parts: bool,
    prefetch: bool,
    cancel: &'c AtomicBool,
}

impl<'c> Walker<'c> {
    /// A walk over `names` (in that order) releasing as `release` says;
    /// `cancel` is looked at before each tensor.
    #[must_use]
    pub fn new(names: Vec<String>, release: Release, cancel: &'c AtomicBool) -> Self {
        Self {
            names,
            release,
            parts: false,
            prefetch: false,
            cancel,
        }
    }

    /// A visit reads a tensor with its scales, biases and block scales
    /// (values as people mean them): their shards are kept until then.
    #[must_use]
    pub fn with_parts(mut self) -> Self {
        self.parts = true;
        self
    }

    /// Streams the first side's shards into the page cache ahead of the
    /// walk and waits before each tensor until its bytes are read.
    #[must_use]
    pub fn with_prefetch(mut self) -> Self {
        self.prefetch = true;
        self
    }

    /// Tensors to visit.
    #[must_use]
    pub fn total(&self) -> usize {
        self.names.len()
    }

    /// Walks: releases everything, clears MLX's cache and resets the peaks,
    /// then visits each tensor, releasing as the policy says, and calls
    /// `progress` after each.
    pub fn run<S: Walkable + ?Sized, V: Visitor<S> + ?Sized>(
        self,
        sides: &mut S,
        visitor: &mut V,
        progress: &mut dyn FnMut(Progress),
    ) -> Walked {
        let started = Instant::now();
        let mut left = self.needs(sides);
        sides.release_all();
        let _ = mlx::clear_cache();
        let _ = mlx::trim_host_heap();
        // Without a reset MLX's peak is the process's, not the walk's: then
        // the highest MLX active sampled is reported instead.
        let mlx_reset = mlx::reset_peak().is_ok();
        let rss_reset = reset_peak_rss();
        let mut walking = WalkProgress {
            done: 0,
            total: self.names.len(),
            highest_rss: 0,
            highest_active: 0,
            sampled: false,
        };
        visitor.begin(sides, &mut walking);
        let (prefetcher, stream) = self.stream(sides);
        let mut read_wait = Duration::ZERO;
        let mut end = End::Finished;
        for (i, name) in self.names.iter().enumerate() {
            if let Some(prefetcher) = &prefetcher {
                end = self.wait(sides, visitor, &mut walking, name, || {
                    if let Some((position, byte)) = stream[i] {
                        read_wait += prefetcher.wait_for(position, byte, self.cancel);
                    }
                });
            }
            if let End::Finished = end {
                end = self.visit(sides, visitor, &mut walking, i, &mut left);
            }
            if !matches!(end, End::Finished) {
                break;
            }
            progress(Progress {
                done: walking.done,
                total: walking.total,
                name: name.clone(),
            });
        }
        drop(prefetcher);
        let (peak_mlx_active_bytes, peak_rss_bytes) = walking.peaks(mlx_reset, rss_reset);
        Walked {
            done: walking.done,
            total: walking.total,
            cancelled: matches!(end, End::Cancelled),
            stopped: match end {
                End::Stopped(name, err) => Some((name, err)),
                _ => None,
            },
            peak_mlx_active_bytes,
            peak_rss_bytes,
            read_wait,
            elapsed: started.elapsed(),
        }
    }

    /// Before the prefetcher's wait for `name`: the visitor's `ready`, the
    /// wait, and the cancel flag after it.
    fn wait<S: Walkable + ?Sized, V: Visitor<S> + ?Sized>(
        &self,
        sides: &mut S,
        visitor: &mut V,
        walking: &mut WalkProgress,
        name: &str,
        wait: impl FnOnce(),
    ) -> End {
        if self.cancel.load(Ordering::Relaxed) {
            return End::Cancelled;
        }
        if let Err(err) = visitor.ready(sides, name, walking) {
            return End::Stopped(name.to_owned(), err);
        }
        wait();
        End::Finished
    }

    /// Visits `names[i]` (unless cancelled), then releases by the policy.
    fn visit<S: Walkable + ?Sized, V: Visitor<S> + ?Sized>(
        &self,
        sides: &mut S,
        visitor: &mut V,
        walking: &mut WalkProgress,
        i: usize,
        left: &mut HashMap<(usize, ShardId), usize>,
    ) -> End {
        let name = &self.names[i];
        if self.cancel.load(Ordering::Relaxed) {
            return End::Cancelled;
        }
        walking.sampled = false;
        if let Err(err) = visitor.visit(sides, name, walking) {
            return End::Stopped(name.clone(), err);
        }
        walking.done += 1;
        self.after(sides, visitor, walking, i, left);
        if !walking.sampled {
            let _ = walking.sample();
        }
        End::Finished
    }

    /// After the visit of `names[i]`: releases by the policy and tells the
    /// visitor when the walk leaves a shard.
    fn after<S: Walkable + ?Sized, V: Visitor<S> + ?Sized>(
        &self,
        sides: &mut S,
        visitor: &mut V,
        walking: &mut WalkProgress,
        i: usize,
        left: &mut HashMap<(usize, ShardId), usize>,
    ) {
        let name = &self.names[i];
        if self.release != Release::Nothing {
            sides.release(name);
        }
        if self.release == Release::Tensor {
            visitor.released(sides, Released::Tensor(name), walking);
        }
        let shard = sides.info(name).map(TensorRef::shard);
        let next = self
            .names
            .get(i + 1)
            .and_then(|n| sides.info(n))
            .map(TensorRef::shard);
        if let Some(shard) = shard
            && next != Some(shard)
        {
            visitor.leaving(sides, shard);
        }
        if self.release != Release::Shard {
            return;
        }
        let mut needed = Vec::new();
        sides.needs(name, self.parts, &mut needed);
        for (side, shard) in needed {
            let Some(count) = left.get_mut(&(side, shard)) else {
                continue;
            };
            *count = count.saturating_sub(1);
            if *count == 0 {
                left.remove(&(side, shard));
                let freed = sides.release_shard(side, shard);
                visitor.released(sides, Released::Shard { side, shard, freed }, walking);
            }
        }
    }

    /// How many visits still need each `(side, shard)`.
    fn needs<S: Walkable + ?Sized>(&self, sides: &S) -> HashMap<(usize, ShardId), usize> {
        let mut left = HashMap::new();
        if self.release != Release::Shard {
            return left;
        }
        let mut needed = Vec::new();
        for name in &self.names {
            needed.clear();
            sides.needs(name, self.parts, &mut needed);
            for &need in &needed {
                *left.entry(need).or_insert(0) += 1;
            }
        }
        left
    }

    /// The prefetcher over the first side's shards in walk order, and for
    /// each tensor its shard's position in that order and its last byte.
    fn stream<S: Walkable + ?Sized>(
        &self,
        sides: &S,
    ) -> (Option<Prefetcher>, Vec<Option<(usize, u64)>>) {
        if !self.prefetch {
            return (None, Vec::new());
        }
        let checkpoint = sides.checkpoint();
        let mut paths: Vec<PathBuf> = Vec::new();
        let mut last = None;
        let stream = self
            .names
            .iter()
            .map(|name| {
                let info = sides.info(name)?;
                if last != Some(info.shard()) {
                    last = Some(info.shard());
                    paths.push(checkpoint.shard(info.shard()).path.clone());
                }
                let end = checkpoint.shard(info.shard()).data_start() + info.data_offsets().1;
                Some((paths.len() - 1, end))
            })
            .collect();
        (Prefetcher::start(paths), stream)
    }
}
