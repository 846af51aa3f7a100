//! Events as a trace records them: what happened, to what, how many bytes,
//! and what its shard holds after.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// What an event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MarkKind {
    /// A checkpoint was opened.
    Open,
    /// A tensor was materialized on request.
    Materialize,
    /// One cached tensor was released.
    Release,
    /// A shard's map and arrays were released.
    ReleaseShard,
    /// Every array and map was released.
    ReleaseAll,
    /// MLX's cache was cleared (and the host heap trimmed).
    ClearCache,
    /// MLX's memory limit changed.
    MemoryLimit,
    /// MLX's cache limit changed.
    CacheLimit,
    /// A walk began.
    WalkStart,
    /// A walk materialized (and transformed) one tensor.
    WalkStep,
    /// A walk finished or was cancelled.
    WalkEnd,
    /// A diff of two checkpoints finished, was cancelled, or could not start.
    DiffEnd,
    /// A value scan (`check --values`) finished or was cancelled.
    CheckEnd,
    /// Something failed.
    Error,
    /// The checkpoint was closed.
    Close,
    /// A recorded job started (target: its command line).
    JobStart,
    /// A recorded job ended (target: "exit N" or "signal N").
    JobEnd,
    /// A recorded job opened a `.safetensors` file (resident: its size).
    FileOpen,
    /// A recorded job closed a `.safetensors` file (resident: 0).
    FileClose,
    /// The job called `mx.load` (reported by its probe; target: the file).
    Load,
    /// The job marked a moment itself (target: its text).
    JobMark,
    /// An exception ended the job (reported by its probe; target: its type
    /// and message; detail: the line that raised it).
    JobException,
    /// A rank of a distributed job began an evaluation that runs
    /// collectives (target: them; detail: `rank R, step K`): it waits there
    /// for the other ranks.
    CollectiveWait,
    /// That evaluation returned (target and detail as for the wait).
    CollectiveDone,
}

impl MarkKind {
    /// The kebab-case name used in files.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Materialize => "materialize",
            Self::Release => "release",
            Self::ReleaseShard => "release-shard",
            Self::ReleaseAll => "release-all",
            Self::ClearCache => "clear-cache",
            Self::MemoryLimit => "memory-limit",
            Self::CacheLimit => "cache-limit",
            Self::WalkStart => "walk-start",
            Self::WalkStep => "walk-step",
            Self::WalkEnd => "walk-end",
            Self::DiffEnd => "diff-end",
            Self::CheckEnd => "check-end",
            Self::Error => "error",
            Self::Close => "close",
            Self::JobStart => "job-start",
            Self::JobEnd => "job-end",
            Self::FileOpen => "file-open",
            Self::FileClose => "file-close",
            Self::Load => "load",
            Self::JobMark => "job-mark",
            Self::JobException => "job-exception",
            Self::CollectiveWait => "collective-wait",
            Self::CollectiveDone => "collective-done",
        }
    }
}

/// Every kind, for the test that the file names and `as_str` agree.
#[cfg(test)]
const ALL_KINDS: [MarkKind; 24] = [
    MarkKind::Open,
    MarkKind::Materialize,
    MarkKind::Release,
    MarkKind::ReleaseShard,
    MarkKind::ReleaseAll,
    MarkKind::ClearCache,
    MarkKind::MemoryLimit,
    MarkKind::CacheLimit,
    MarkKind::WalkStart,
    MarkKind::WalkStep,
    MarkKind::WalkEnd,
    MarkKind::DiffEnd,
    MarkKind::CheckEnd,
    MarkKind::Error,
    MarkKind::Close,
    MarkKind::JobStart,
    MarkKind::JobEnd,
    MarkKind::FileOpen,
    MarkKind::FileClose,
    MarkKind::Load,
    MarkKind::JobMark,
    MarkKind::JobException,
    MarkKind::CollectiveWait,
    MarkKind::CollectiveDone,
];

/// An event, before it is placed on a clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// What happened.
    pub kind: MarkKind,
    /// The tensor, shard, path or setting it was about.
    pub target: String,
    /// Bytes involved (materialized, freed, a limit); 0 when none.
    pub bytes: u64,
    /// Anything else worth a line (device, policy, error message).
    pub detail: String,
    /// The shard whose resident bytes this event changed, and what it holds
    /// now, by the Weights core's bookkeeping.
    pub resident: Option<(String, u64)>,
}

impl Mark {
    /// A mark with no bytes, detail or residency change.
    #[must_use]
    pub fn new(kind: MarkKind, target: impl Into<String>) -> Self {
        Self {
            kind,
            target: target.into(),
            bytes: 0,
            detail: String::new(),
            resident: None,
        }
    }

    /// With bytes.
    #[must_use]
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    /// With a detail line.
    #[must_use]
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// With the shard residency after the event.
    #[must_use]
    pub fn resident(mut self, shard: impl Into<String>, bytes: u64) -> Self {
        self.resident = Some((shard.into(), bytes));
        self
    }

    /// One line for markers and tables.
    #[must_use]
    pub fn label(&self) -> String {
        let mut label = self.kind.as_str().to_owned();
        if !self.target.is_empty() {
            label.push(' ');
            label.push_str(&self.target);
        }
        if self.bytes > 0 {
            let _ = write!(label, " ({})", crate::units::human_bytes(self.bytes));
        }
        label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_of_kinds_are_their_as_str() {
        for kind in ALL_KINDS {
            assert_eq!(serde_json::to_value(kind).expect("json"), kind.as_str());
        }
    }
}
