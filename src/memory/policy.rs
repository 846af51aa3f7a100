//! Release policies of a walk and what the headers predict for each.

use serde::{Deserialize, Serialize};

/// What a walk releases, and when. In files (traces) by its command-line
/// name, `as_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Keep every tensor (and every output) until the end.
    Retain,
    /// Release each tensor after use while its shard's map lives: frees
    /// nothing, the whole model accumulates (the trap).
    ReleaseTensor,
    /// Release each shard (its map and arrays) as the walk leaves it.
    ReleaseShard,
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Policy {
    /// Every policy, in the order they are shown.
    pub const ALL: [Self; 3] = [Self::Retain, Self::ReleaseTensor, Self::ReleaseShard];

    /// The command-line name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retain => "retain",
            Self::ReleaseTensor => "release-tensor",
            Self::ReleaseShard => "release-shard",
        }
    }

    /// The policy of a command-line name (also its name in trace files).
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// What the headers predict for this policy.
    #[must_use]
    pub fn expected(self, peaks: &ExpectedPeaks) -> u64 {
        match self {
            Self::Retain => peaks.retain,
            Self::ReleaseTensor => peaks.release_tensor,
            Self::ReleaseShard => peaks.release_shard,
        }
    }
}

/// Expected peaks from the headers, one per walk policy, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExpectedPeaks {
    /// Keep everything.
    pub retain: u64,
    /// Release each tensor after use while the maps live (the trap).
    pub release_tensor: u64,
    /// Release each shard as the walk leaves it.
    pub release_shard: u64,
}
