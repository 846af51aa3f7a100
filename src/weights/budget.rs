//! The window's previews within a budget of memory: browsing keeps what
//! the last few tensors shown hold (a second look is instant), and lets go
//! of the least recently shown first once they hold more than the budget,
//! through the Weights core's own [`Weights::forget`]. A tensor pinned by
//! the user is kept whatever the budget; the one just shown is kept even
//! when it alone is larger.

use std::collections::{HashSet, VecDeque};

use super::{ShardLoader, Weights, WeightsError};

/// The budget when none is set: a few hundred MiB, a handful of a large
/// model's MLP weights.
pub const DEFAULT_PREVIEW_BUDGET: u64 = 512 << 20;

/// What the previews hold now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreviewsHeld {
    /// Bytes the previews kept hold, by the core's bookkeeping.
    pub used_bytes: u64,
    /// The budget.
    pub limit_bytes: u64,
    /// Previews kept.
    pub kept: usize,
    /// The pinned ones (canonical names), oldest pin first.
    pub pinned: Vec<String>,
}

/// A preview let go to keep within the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgotten {
    /// Its canonical name.
    pub name: String,
    /// Bytes freed (into MLX's cache).
    pub freed_bytes: u64,
}

/// The previews shown, least recently shown first, and the budget.
#[derive(Debug, Clone)]
pub struct PreviewBudget {
    limit: u64,
    shown: VecDeque<String>,
    pinned: Vec<String>,
}

impl Default for PreviewBudget {
    fn default() -> Self {
        Self::new(DEFAULT_PREVIEW_BUDGET)
    }
}

impl PreviewBudget {
    /// No previews yet, within `limit` bytes.
    #[must_use]
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            shown: VecDeque::new(),
            pinned: Vec::new(),
        }
    }

    /// The budget now.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// A new budget (kept by [`PreviewBudget::enforce`]).
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Pins canonical `name` (kept whatever the budget) or unpins it.
    pub fn pin(&mut self, name: &str, pinned: bool) {
        self.pinned.retain(|p| p != name);
        if pinned {
            self.pinned.push(name.to_owned());
        }
    }

    /// Whether `name` is pinned.
    #[must_use]
    pub fn is_pinned(&self, name: &str) -> bool {
        self.pinned.iter().any(|p| p == name)
    }

    /// Forgets every preview and pin: the checkpoint closed or changed.
    pub fn clear(&mut self) {
        self.shown.clear();
        self.pinned.clear();
    }

    /// `name` was just shown: it becomes the most recent, and the budget is
    /// kept (see [`PreviewBudget::enforce`]).
    ///
    /// # Errors
    /// As [`Weights::forget`].
    pub fn shown<N: ShardLoader>(
        &mut self,
        weights: &mut Weights<N>,
        name: &str,
    ) -> Result<Vec<Forgotten>, WeightsError> {
        self.shown.retain(|s| s != name);
        self.shown.push_back(name.to_owned());
        self.enforce(weights)
    }

    /// Lets go of the least recently shown previews, pinned ones and the
    /// most recent excepted, until what the rest hold fits the budget.
    /// Previews that hold nothing any more (their shard released, a walk)
    /// leave the list.
    ///
    /// # Errors
    /// As [`Weights::forget`] (what was let go before it stays so).
    pub fn enforce<N: ShardLoader>(
        &mut self,
        weights: &mut Weights<N>,
    ) -> Result<Vec<Forgotten>, WeightsError> {
        self.shown.retain(|s| weights.resident_bytes_of(s) > 0);
        let mut used: u64 = self
            .shown
            .iter()
            .map(|s| weights.resident_bytes_of(s))
            .sum();
        let mut forgotten = Vec::new();
        let newest = self.shown.back().cloned();
        let pinned: HashSet<&str> = self.pinned.iter().map(String::as_str).collect();
        let mut kept = VecDeque::with_capacity(self.shown.len());
        while let Some(name) = self.shown.pop_front() {
            let keep = used <= self.limit
                || pinned.contains(name.as_str())
                || newest.as_deref() == Some(name.as_str());
            if keep {
                kept.push_back(name);
                continue;
            }
            let held = weights.resident_bytes_of(&name);
            let freed_bytes = match weights.forget(&name) {
                Ok(freed) => freed,
                Err(err) => {
                    kept.push_back(name);
                    kept.extend(self.shown.drain(..));
                    self.shown = kept;
                    return Err(err);
                }
            };
            used = used.saturating_sub(held);
            forgotten.push(Forgotten { name, freed_bytes });
        }
        self.shown = kept;
        Ok(forgotten)
    }

    /// What the previews hold now (those whose bytes were released some
    /// other way, by a walk or a shard's release, hold nothing).
    #[must_use]
    pub fn held<N: ShardLoader>(&self, weights: &Weights<N>) -> PreviewsHeld {
        let holding: Vec<u64> = self
            .shown
            .iter()
            .map(|s| weights.resident_bytes_of(s))
            .filter(|&b| b > 0)
            .collect();
        PreviewsHeld {
            used_bytes: holding.iter().sum(),
            limit_bytes: self.limit,
            kept: holding.len(),
            pinned: self.pinned.clone(),
        }
    }

    /// What the previews hold with nothing open: nothing, and the budget.
    #[must_use]
    pub fn held_nothing(&self) -> PreviewsHeld {
        PreviewsHeld {
            limit_bytes: self.limit,
            ..PreviewsHeld::default()
        }
    }
}
