//! The diff of two checkpoints, one tensor at a time on MLX, releasing each
//! shard as soon as the comparison no longer needs it, so two large
//! checkpoints diff within about two shards of memory. Either side may have a
//! view installed: names are compared as the graph sees them.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::mlx;

use super::{Native, Weights};

/// A tensor both sides have with a different shape or dtype.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// Canonical name.
    pub name: String,
    /// Dtype and shape in A (after A's view).
    pub a_dtype: String,
    /// Shape in A.
    pub a_shape: Vec<i32>,
    /// Dtype in B.
    pub b_dtype: String,
    /// Shape in B.
    pub b_shape: Vec<i32>,
}

/// How a tensor both sides have (same shape and dtype) differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Common {
    /// Canonical name.
    pub name: String,
    /// Largest `|a - b|` (null in JSON when NaN).
    pub max_abs_diff: f64,
    /// `‖a - b‖ / ‖b‖`.
    pub rel_error: f64,
    /// Whether either side has a NaN.
    pub nan: bool,
    /// Whether either side has an infinity.
    pub inf: bool,
}

/// A tensor that could not be compared (its shard failed to load, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffFailure {
    /// Canonical name.
    pub name: String,
    /// Why.
    pub error: String,
}

/// The diff of A against B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    /// Canonical names only A has, sorted.
    pub only_in_a: Vec<String>,
    /// Canonical names only B has, sorted.
    pub only_in_b: Vec<String>,
    /// Names with a different shape or dtype.
    pub changed: Vec<Changed>,
    /// Names compared value by value, in A's walk order.
    pub common: Vec<Common>,
    /// Names that could not be compared.
    pub failed: Vec<DiffFailure>,
    /// Tensors compared so far / in all.
    pub compared: usize,
    /// Tensors to compare.
    pub total: usize,
    /// Whether it was cancelled.
    pub cancelled: bool,
    /// MLX's peak active memory over the diff (reset when it began).
    pub peak_mlx_active_bytes: u64,
    /// Largest shard of A plus largest shard of B, in bytes (the bound the
    /// shard releases aim for).
    pub two_shards_bytes: u64,
    /// Wall time.
    pub elapsed_secs: f64,
}

impl DiffReport {
    /// Common tensors whose values differ at all.
    pub fn differing(&self) -> impl Iterator<Item = &Common> {
        self.common
            .iter()
            .filter(|c| c.max_abs_diff != 0.0 || c.nan || c.inf)
    }
}

/// Progress of a running diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffProgress {
    /// Tensors compared.
    pub done: usize,
    /// Tensors to compare.
    pub total: usize,
    /// The tensor just compared.
    pub name: String,
}

/// Compares every tensor the two sides share, calling `progress` after each;
/// `cancel` is checked between tensors. Everything cached on both sides is
/// released first and MLX's cache cleared, so the peak is the diff's own.
pub fn diff<N: Native, M: Native>(
    a: &mut Weights<N>,
    b: &mut Weights<M>,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(DiffProgress),
) -> DiffReport {
    let started = Instant::now();
    let names_a = a.walk_order();
    let names_b: BTreeSet<String> = b.tensor_names().into_iter().collect();
    let set_a: BTreeSet<&str> = names_a.iter().map(String::as_str).collect();
    let only_in_a: Vec<String> = set_a
        .iter()
        .filter(|n| !names_b.contains(**n))
        .map(|n| (*n).to_owned())
        .collect();
    let only_in_b: Vec<String> = names_b
        .iter()
        .filter(|n| !set_a.contains(n.as_str()))
        .cloned()
        .collect();
    let common: Vec<String> = names_a
        .iter()
        .filter(|n| names_b.contains(*n))
        .cloned()
        .collect();
    // How many comparisons still need each shard; at 0 the shard goes.
    let mut left_a = remaining(a, &common);
    let mut left_b = remaining(b, &common);
    let two_shards_bytes = largest_shard(a) + largest_shard(b);

    a.release_all();
    b.release_all();
    let _ = mlx::clear_cache();
    let _ = mlx::reset_peak();
    let mut report = DiffReport {
        only_in_a,
        only_in_b,
        changed: Vec::new(),
        common: Vec::new(),
        failed: Vec::new(),
        compared: 0,
        total: common.len(),
        cancelled: false,
        peak_mlx_active_bytes: 0,
        two_shards_bytes,
        elapsed_secs: 0.0,
    };
    for name in &common {
        if cancel.load(Ordering::Relaxed) {
            report.cancelled = true;
            break;
        }
        match compare(a, b, name) {
            Ok(Outcome::Changed(changed)) => report.changed.push(changed),
            Ok(Outcome::Common(common)) => report.common.push(common),
            Err(error) => report.failed.push(DiffFailure {
                name: name.clone(),
                error,
            }),
        }
        a.release(name);
        b.release(name);
        release_when_done(a, &mut left_a, name);
        release_when_done(b, &mut left_b, name);
        report.compared += 1;
        progress(DiffProgress {
            done: report.compared,
            total: report.total,
            name: name.clone(),
        });
    }
    a.release_all();
    b.release_all();
    report.peak_mlx_active_bytes = mlx::memory().map_or(0, |m| m.peak_bytes);
    report.elapsed_secs = started.elapsed().as_secs_f64();
    report
}

enum Outcome {
    Changed(Changed),
    Common(Common),
}

fn compare<N: Native, M: Native>(
    a: &mut Weights<N>,
    b: &mut Weights<M>,
    name: &str,
) -> Result<Outcome, String> {
    let ta = a.tensor(name).map_err(|e| format!("A: {e}"))?;
    let tb = b.tensor(name).map_err(|e| format!("B: {e}"))?;
    if ta.shape() != tb.shape() || ta.dtype() != tb.dtype() {
        return Ok(Outcome::Changed(Changed {
            name: name.to_owned(),
            a_dtype: format!("{:?}", ta.dtype()),
            a_shape: ta.shape().to_vec(),
            b_dtype: format!("{:?}", tb.dtype()),
            b_shape: tb.shape().to_vec(),
        }));
    }
    let d = mlx::difference(&ta, &tb).map_err(|e| e.to_string())?;
    Ok(Outcome::Common(Common {
        name: name.to_owned(),
        max_abs_diff: d.max_abs_diff,
        rel_error: d.rel_error,
        nan: d.nan,
        inf: d.inf,
    }))
}

/// Shard position → how many of `names` it holds.
fn remaining<N: Native>(weights: &Weights<N>, names: &[String]) -> HashMap<usize, usize> {
    let mut left = HashMap::new();
    for name in names {
        if let Some(info) = weights.info(name) {
            *left.entry(info.shard).or_insert(0) += 1;
        }
    }
    left
}

fn release_when_done<N: Native>(
    weights: &mut Weights<N>,
    left: &mut HashMap<usize, usize>,
    name: &str,
) {
    let Some(shard) = weights.info(name).map(|i| i.shard) else {
        return;
    };
    if let Some(count) = left.get_mut(&shard) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            let file = weights.checkpoint().shards()[shard].file.clone();
            weights.release_shard(&file);
        }
    }
}

fn largest_shard<N: Native>(weights: &Weights<N>) -> u64 {
    weights
        .checkpoint()
        .shards()
        .iter()
        .map(|s| s.data_bytes)
        .max()
        .unwrap_or(0)
}
