//! What each shard held over a trace, from its events: the steps of the
//! per-shard plot and what was resident at a moment.

use super::{HashMap, MarkKind, Trace, TraceEvent};

impl Trace {
    /// Per-shard resident bytes over time: see [`residency_steps`].
    #[must_use]
    pub fn residency_steps(&self) -> Residency {
        residency_steps(&self.events)
    }

    /// What was resident at `t_secs`: see [`resident_at`].
    #[must_use]
    pub fn resident_at(&self, t_secs: f64) -> Vec<ResidentShard> {
        resident_at(&self.events, t_secs)
    }
}

/// Per-shard resident bytes over time, as changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Residency {
    /// Shard files, in order of first appearance.
    pub shards: Vec<String>,
    /// Every change, in time order.
    pub changes: Vec<ResidencyChange>,
}

/// One change of what a shard holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResidencyChange {
    /// When.
    pub t_secs: f64,
    /// The shard (a position in [`Residency::shards`]); `None`: every shard
    /// dropped to 0 (open, release all, close).
    pub shard: Option<usize>,
    /// What it holds now.
    pub bytes: u64,
}

impl Residency {
    /// Every shard's bytes after at most about `rows` of the changes (evenly
    /// spaced, the last always included): what a stacked plot draws.
    #[must_use]
    pub fn sampled(&self, rows: usize) -> Vec<(f64, Vec<u64>)> {
        let stride = self.changes.len().div_ceil(rows.max(1)).max(1);
        let mut now = vec![0; self.shards.len()];
        let mut out = Vec::new();
        for (i, change) in self.changes.iter().enumerate() {
            match change.shard {
                Some(k) => now[k] = change.bytes,
                None => now.fill(0),
            }
            if i % stride == 0 || i + 1 == self.changes.len() {
                out.push((change.t_secs, now.clone()));
            }
        }
        out
    }
}

/// Per-shard resident bytes over time, from the events' residency fields.
#[must_use]
pub fn residency_steps<'a>(events: impl IntoIterator<Item = &'a TraceEvent>) -> Residency {
    let mut residency = Residency::default();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for event in events {
        match event.kind {
            MarkKind::Open | MarkKind::ReleaseAll | MarkKind::Close => {
                residency.changes.push(ResidencyChange {
                    t_secs: event.t_secs,
                    shard: None,
                    bytes: 0,
                });
            }
            _ => {
                if let (Some(shard), Some(bytes)) = (&event.shard, event.shard_resident_bytes) {
                    let k = *index.entry(shard.as_str()).or_insert_with(|| {
                        residency.shards.push(shard.clone());
                        residency.shards.len() - 1
                    });
                    residency.changes.push(ResidencyChange {
                        t_secs: event.t_secs,
                        shard: Some(k),
                        bytes,
                    });
                }
            }
        }
    }
    residency
}

/// What was resident at `t_secs`, from the events: per shard, its bytes
/// (the core's figure) and the tensors materialized from it, each with
/// whether it had been released while its map still held it. A recorded
/// job's open files count as shards with their size and no tensors.
#[must_use]
pub fn resident_at<'a>(
    events: impl IntoIterator<Item = &'a TraceEvent>,
    t_secs: f64,
) -> Vec<ResidentShard> {
    // Per shard: its entry and its tensors' positions by name.
    let mut shards: Vec<(ResidentShard, HashMap<String, usize>)> = Vec::new();
    for event in events.into_iter().take_while(|e| e.t_secs <= t_secs) {
        match event.kind {
            MarkKind::Open | MarkKind::ReleaseAll | MarkKind::Close => shards.clear(),
            MarkKind::ReleaseShard => shards.retain(|(s, _)| s.shard != event.target),
            MarkKind::Release => {
                for (shard, names) in &mut shards {
                    if event.shard.as_ref().is_some_and(|s| *s != shard.shard) {
                        continue;
                    }
                    if let Some(&i) = names.get(&event.target) {
                        shard.tensors[i].released = true;
                    }
                }
            }
            MarkKind::Materialize
            | MarkKind::WalkStep
            | MarkKind::FileOpen
            | MarkKind::FileClose => {
                let (Some(file), Some(bytes)) = (&event.shard, event.shard_resident_bytes) else {
                    continue;
                };
                let k = shards
                    .iter()
                    .position(|(s, _)| &s.shard == file)
                    .unwrap_or_else(|| {
                        let shard = ResidentShard {
                            shard: file.clone(),
                            bytes: 0,
                            tensors: Vec::new(),
                        };
                        shards.push((shard, HashMap::new()));
                        shards.len() - 1
                    });
                let (shard, names) = &mut shards[k];
                shard.bytes = bytes;
                // A recorded job's file is held whole: it has no tensors.
                if matches!(event.kind, MarkKind::FileOpen | MarkKind::FileClose) {
                    continue;
                }
                if let Some(&i) = names.get(&event.target) {
                    shard.tensors[i].released = false;
                } else {
                    names.insert(event.target.clone(), shard.tensors.len());
                    shard.tensors.push(ResidentTensor {
                        name: event.target.clone(),
                        bytes: event.bytes,
                        released: false,
                    });
                }
            }
            _ => {}
        }
    }
    shards
        .into_iter()
        .map(|(s, _)| s)
        .filter(|s| s.bytes > 0)
        .collect()
}

/// A shard's resident bytes at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResidentShard {
    /// Shard file.
    pub shard: String,
    /// Bytes its map holds (the core's bookkeeping).
    pub bytes: u64,
    /// Tensors materialized from it.
    pub tensors: Vec<ResidentTensor>,
}

/// A resident tensor at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResidentTensor {
    /// Tensor name.
    pub name: String,
    /// Its bytes.
    pub bytes: u64,
    /// Released by name, yet still held by its shard's map (the trap).
    pub released: bool,
}
