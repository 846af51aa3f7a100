//! The Weights core on real MLX: lazy opening, exact materialization, the
//! release trap, shard release and reopen, failure cleanup, views.
// Exact float equality is intended: values are small integers and x + 1.
#![allow(clippy::float_cmp)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use common::{Tensor, mlx_memory_lock, write_safetensors};
use weightscope::checkpoint::{Checkpoint, ShardId};
use weightscope::mlx::{self, Array, MlxError, ShardMap};
use weightscope::weights::{
    MlxLoader, Release, Released, ShardLoader, View, Visitor, WalkProgress, Walker, Weights,
    WeightsError,
};

const MIB: u64 = 1024 * 1024;

fn active() -> u64 {
    mlx::memory().expect("memory").active_bytes
}

/// Three shards of two 1 MiB f32 tensors each (`s{shard}.t{i}`, values = i).
fn write_model(dir: &Path) {
    for shard in 0..3 {
        let tensors: Vec<Tensor> = (0..2)
            .map(|i| {
                let values = vec![(shard * 10 + i) as f32; 256 * 1024];
                Tensor::f32(&format!("s{shard}.t{i}"), &[512, 512], &values)
            })
            .collect();
        write_safetensors(&dir.join(format!("shard-{shard}.safetensors")), &tensors);
    }
}

#[test]
fn the_release_trap_and_the_shard_release_fix() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    mlx::clear_cache().expect("clear");
    let base = active();

    let mut weights = Weights::open(dir.path()).expect("open");
    assert_eq!(active(), base, "opening reads no tensor bytes");
    assert!(weights.is_shard_open(ShardId(0)));

    let a = weights.tensor("s0.t0").expect("tensor");
    mlx::evaluate(&a).expect("eval");
    assert_eq!(
        active() - base,
        MIB,
        "materializing adds exactly the tensor's bytes"
    );
    let b = weights.tensor("s0.t1").expect("tensor");
    mlx::evaluate(&b).expect("eval");
    let c = weights.tensor("s1.t0").expect("tensor");
    mlx::evaluate(&c).expect("eval");
    assert_eq!(active() - base, 3 * MIB);
    drop((a, b, c));

    // The trap: releasing tensors frees nothing while their shard's map lives.
    weights.release("s0.t0");
    weights.release("s0.t1");
    weights.release("never-asked-for");
    assert_eq!(active() - base, 3 * MIB, "release() alone frees nothing");

    // The fix: releasing the shard frees everything materialized from it.
    let shard0 = weights.checkpoint().find_shard("shard-0.safetensors");
    assert_eq!(shard0, Some(ShardId(0)), "found by name");
    // (By the core's bookkeeping nothing was materialized: `tensor` plus
    // `evaluate` bypass it, so the freed figure it returns is 0.)
    assert_eq!(weights.release_shard(ShardId(0)), 0);
    assert_eq!(
        active() - base,
        MIB,
        "release_shard frees the shard's 2 MiB"
    );
    assert!(!weights.is_shard_open(ShardId(0)));
    assert_eq!(
        weights.checkpoint().find_shard("no-such-shard.safetensors"),
        None
    );
    assert_eq!(
        weights.release_shard(ShardId(99)),
        0,
        "no such shard: nothing"
    );

    // A released shard reopens transparently, lazily.
    let again = weights.tensor("s0.t1").expect("reopen");
    assert!(weights.is_shard_open(ShardId(0)));
    assert_eq!(active() - base, MIB, "reopening reads no bytes");
    assert_eq!(mlx::to_f32_vec(&again).expect("values")[0], 1.0);
    assert_eq!(active() - base, 2 * MIB, "s0.t1 is materialized again");
    drop(again);

    drop(weights);
    assert_eq!(active(), base, "dropping Weights releases everything");
}

/// Wraps the real MLX calls; fails at one shard and counts frees.
struct Failing {
    fail_at: usize,
    opened: usize,
    freed: Arc<Mutex<Vec<PathBuf>>>,
}

impl ShardLoader for Failing {
    fn open_shard(
        &mut self,
        checkpoint: &Checkpoint,
        shard: ShardId,
    ) -> Result<ShardMap, MlxError> {
        self.opened += 1;
        if self.opened == self.fail_at {
            return Err(MlxError::Load {
                path: checkpoint.shard(shard).path.clone(),
                message: "injected failure".into(),
            });
        }
        MlxLoader.open_shard(checkpoint, shard)
    }

    fn free_shard(&mut self, map: ShardMap) {
        self.freed
            .lock()
            .expect("lock")
            .push(map.path().to_path_buf());
        drop(map);
    }
}

#[test]
fn a_failure_at_shard_n_frees_the_maps_of_shards_before_it() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    let freed = Arc::new(Mutex::new(Vec::new()));
    let native = Failing {
        fail_at: 3,
        opened: 0,
        freed: Arc::clone(&freed),
    };
    let checkpoint = Checkpoint::open(dir.path()).expect("headers");
    let err = Weights::open_with(checkpoint, native)
        .err()
        .expect("shard 3 fails");
    assert!(
        err.to_string().contains("injected failure") && err.to_string().contains("shard-2"),
        "{err}"
    );
    let mut freed = freed.lock().expect("lock").clone();
    freed.sort();
    assert_eq!(
        freed,
        [
            dir.path().join("shard-0.safetensors"),
            dir.path().join("shard-1.safetensors")
        ]
    );

    // Without a failure, dropping frees every map exactly once.
    let freed = Arc::new(Mutex::new(Vec::new()));
    let native = Failing {
        fail_at: usize::MAX,
        opened: 0,
        freed: Arc::clone(&freed),
    };
    let weights =
        Weights::open_with(Checkpoint::open(dir.path()).expect("headers"), native).expect("open");
    drop(weights);
    assert_eq!(freed.lock().expect("lock").len(), 3);
}

#[test]
fn views_rename_drop_and_fix_up_lazily() {
    // MLX memory counters are process-wide: no test here runs beside one that asserts on them.
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    // As a Qwen3.5-style checkpoint stores it: a prefix, an extra tensor, and
    // an RMSNorm weight stored as gamma - 1. Written by MLX's own writer.
    let gamma_minus_one = Array::from_slice(&[0.0f32, 0.5, -0.25], &[3]);
    let embed = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let mtp = Array::from_slice(&[9.0f32], &[1]);
    Array::save_safetensors(
        [
            ("model.language_model.norm.weight", &gamma_minus_one),
            ("model.language_model.embed_tokens.weight", &embed),
            ("mtp.fc.weight", &mtp),
        ],
        None,
        dir.path().join("model.safetensors"),
    )
    .expect("save");

    let mut weights = Weights::open(dir.path()).expect("open");
    let view = View::from_names([
        ("model.norm.weight", "model.language_model.norm.weight"),
        (
            "model.embed_tokens.weight",
            "model.language_model.embed_tokens.weight",
        ),
    ])
    .with_fixup(|name, array| {
        if name.ends_with("norm.weight") {
            let one = Array::from_f32(1.0);
            return array.add(&one).map(Some).map_err(|e| MlxError::Op {
                operation: "fixup",
                message: e.to_string(),
            });
        }
        Ok(None)
    });
    weights.set_view(view).expect("before any tensor");

    assert_eq!(
        weights.tensor_names(),
        ["model.embed_tokens.weight", "model.norm.weight"]
    );
    assert!(weights.has("model.norm.weight"));
    assert!(!weights.has("mtp.fc.weight"), "dropped by the view");
    assert!(matches!(
        weights.tensor("mtp.fc.weight"),
        Err(WeightsError::NoTensor(_))
    ));
    assert_eq!(
        weights.file_of("model.norm.weight"),
        Some("model.safetensors")
    );
    assert_eq!(
        weights
            .info("model.embed_tokens.weight")
            .map(|t| t.shape().to_vec()),
        Some(vec![2, 2])
    );

    let norm = weights.tensor("model.norm.weight").expect("norm");
    assert_eq!(
        mlx::to_f32_vec(&norm).expect("values"),
        [1.0, 1.5, 0.75],
        "gamma comes back +1"
    );
    let embed = weights.tensor("model.embed_tokens.weight").expect("embed");
    assert_eq!(
        mlx::to_f32_vec(&embed).expect("values"),
        [1.0, 2.0, 3.0, 4.0]
    );

    let late = weights.set_view(View::default());
    assert!(matches!(late, Err(WeightsError::ViewTooLate)));
}

/// A new whole-model job is one visitor: this one notes, at each tensor,
/// which shards were open and the bytes MLX held, and what was released.
#[derive(Default)]
struct Ledger {
    visits: Vec<(String, Vec<bool>, u64)>,
    released: Vec<String>,
    left: Vec<ShardId>,
}

impl<N: ShardLoader> Visitor<Weights<N>> for Ledger {
    fn visit(
        &mut self,
        weights: &mut Weights<N>,
        name: &str,
        _walking: &mut WalkProgress,
    ) -> Result<(), WeightsError> {
        if name == "s2.t1" {
            return Err(WeightsError::NoTensor("refused by the ledger".into()));
        }
        weights.materialize(name)?;
        let open = (0..3).map(|s| weights.is_shard_open(ShardId(s))).collect();
        self.visits.push((name.to_owned(), open, active()));
        Ok(())
    }

    fn released(
        &mut self,
        weights: &mut Weights<N>,
        what: Released<'_>,
        _walking: &mut WalkProgress,
    ) {
        self.released.push(match what {
            Released::Tensor(name) => name.to_owned(),
            Released::Shard { shard, freed, .. } => {
                format!("{} ({freed})", weights.checkpoint().shard(shard).file)
            }
        });
    }

    fn leaving(&mut self, _weights: &mut Weights<N>, shard: ShardId) {
        self.left.push(shard);
    }
}

#[test]
fn the_walker_releases_shards_as_it_leaves_them_and_stops_on_an_error() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    let mut weights = Weights::open(dir.path()).expect("open");
    // Something cached before the walk: the walker starts from nothing.
    weights.materialize("s1.t0").expect("materialize");
    mlx::clear_cache().expect("clear");
    let cancel = AtomicBool::new(false);
    let names = weights.walk_order();
    let mut ledger = Ledger::default();
    let mut progress = Vec::new();
    let walked =
        Walker::new(names, Release::Shard, &cancel).run(&mut weights, &mut ledger, &mut |p| {
            progress.push((p.done, p.name));
        });
    let names: Vec<&str> = ledger.visits.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["s0.t0", "s0.t1", "s1.t0", "s1.t1", "s2.t0"]);
    // Shard 0 is released after its second tensor, so at s1.t0 only shard 1
    // (reopened) holds bytes: 1 MiB, not the 3 MiB of a walk that keeps them.
    assert_eq!(ledger.visits[2].1, [false, true, false]);
    assert_eq!(ledger.visits[2].2, MIB, "only s1.t0 is held");
    assert_eq!(ledger.visits[1].2, 2 * MIB);
    assert_eq!(
        ledger.released,
        [
            format!("shard-0.safetensors ({})", 2 * MIB),
            format!("shard-1.safetensors ({})", 2 * MIB),
        ]
    );
    assert_eq!(
        ledger.left,
        [ShardId(0), ShardId(1)],
        "left 0 and 1; stopped in 2"
    );
    assert_eq!((walked.done, walked.total), (5, 6));
    assert!(!walked.cancelled);
    let (name, err) = walked.stopped.expect("stopped");
    assert_eq!(name, "s2.t1");
    assert!(err.to_string().contains("refused by the ledger"), "{err}");
    assert!(walked.peak_mlx_active_bytes >= 2 * MIB);
    assert_eq!(progress.last(), Some(&(5, "s2.t0".to_owned())));

    // Cancelled before it starts: nothing visited, nothing left resident.
    cancel.store(true, std::sync::atomic::Ordering::Relaxed);
    let names = weights.walk_order();
    let mut ledger = Ledger::default();
    let walked =
        Walker::new(names, Release::Tensor, &cancel).run(&mut weights, &mut ledger, &mut |_| {});
    assert!(walked.cancelled);
    assert_eq!(walked.done, 0);
    assert!(ledger.visits.is_empty());
    assert_eq!(
        (0..3)
            .map(|s| weights.resident_bytes(ShardId(s)))
            .sum::<u64>(),
        0
    );
}

/// `forget` frees what showing one tensor made resident while its shard
/// stays open (unlike `release`, the trap), and the tensor reads again,
/// the same values.
#[test]
fn forgetting_a_tensor_frees_it_while_its_shard_stays_open() {
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    mlx::clear_cache().expect("clear");
    let base = active();
    let mut weights = Weights::open(dir.path()).expect("open");
    drop(weights.materialize("s0.t0").expect("t0"));
    drop(weights.materialize("s0.t1").expect("t1"));
    assert_eq!(active() - base, 2 * MIB);
    assert_eq!(weights.resident_bytes_of("s0.t0"), MIB);
    assert_eq!(weights.forget("s0.t0").expect("forget"), MIB);
    assert_eq!(active() - base, MIB, "t0's bytes freed, t1's kept");
    assert!(weights.is_shard_open(ShardId(0)), "the shard stays open");
    assert_eq!(weights.resident_bytes(ShardId(0)), MIB);
    assert_eq!(weights.resident_bytes_of("s0.t0"), 0);
    assert_eq!(weights.forget("s0.t0").expect("twice"), 0, "nothing left");
    // Asked again: read again, the same values.
    let again = weights.materialize("s0.t0").expect("again");
    assert_eq!(active() - base, 2 * MIB);
    assert_eq!(mlx::to_f32_vec(&again).expect("values")[..3], [0.0; 3]);
    drop(again);
    // A released shard leaves nothing to forget.
    weights.release_shard(ShardId(0));
    assert_eq!(weights.forget("s0.t1").expect("released"), 0);
    assert_eq!(active(), base);
}

/// The previews' budget: showing more tensors than it holds keeps MLX
/// active memory within it, the least recently shown let go first; a
/// pinned one stays; a smaller budget lets go at once.
#[test]
fn previews_stay_within_their_budget_and_a_pinned_one_stays() {
    use weightscope::weights::{PreviewBudget, PreviewOptions};
    let _lock = mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_model(dir.path());
    mlx::clear_cache().expect("clear");
    let base = active();
    let mut weights = Weights::open(dir.path()).expect("open");
    let mut budget = PreviewBudget::new(3 * MIB);
    let options = PreviewOptions::default();
    let names = ["s0.t0", "s0.t1", "s1.t0", "s1.t1", "s2.t0", "s2.t1"];
    budget.pin("s0.t0", true);
    for (k, name) in names.iter().enumerate() {
        weights.preview(name, &options).expect("preview");
        let forgotten = budget.shown(&mut weights, name).expect("budget");
        let held = budget.held(&weights);
        assert!(held.used_bytes <= 3 * MIB, "{name}: {held:?}");
        assert!(
            active() - base <= 3 * MIB,
            "{name}: {} MiB active",
            (active() - base) / MIB
        );
        if k >= 3 {
            assert_eq!(forgotten.len(), 1, "{name}: one let go: {forgotten:?}");
            assert_ne!(forgotten[0].name, "s0.t0", "the pinned one stays");
        }
    }
    assert_eq!(weights.resident_bytes_of("s0.t0"), MIB, "pinned");
    assert_eq!(weights.resident_bytes_of("s2.t1"), MIB, "the newest");
    assert_eq!(weights.resident_bytes_of("s1.t0"), 0, "let go");
    // A smaller budget lets go at once, oldest first; the newest stays.
    budget.set_limit(MIB);
    budget.pin("s0.t0", false);
    let forgotten = budget.enforce(&mut weights).expect("enforce");
    let names: Vec<&str> = forgotten.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["s0.t0", "s2.t0"]);
    assert_eq!(active() - base, MIB);
}
