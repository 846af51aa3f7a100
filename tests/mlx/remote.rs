//! Hub repos and URLs read through a loopback server that answers as the
//! Hub does (`common::hub`): what is fetched, counted per request, and
//! every figure equal to the same checkpoint read from the disk.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::convert::{Recipe, convert};
use common::hub::{Behaviour, Hub, TOKEN};
use common::{Tensor, write_safetensors};
use serde_json::Value;
use weightscope::checkpoint::QuantMode;

/// The CLI with the Hub at `hub`, a private cache and no token, plus `env`.
fn weightscope(hub: &Hub, cache: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weightscope"));
    cmd.args(args)
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("WEIGHTSCOPE_CACHE_DIR", cache)
        .env("HF_HOME", cache.join("no-hf-home"))
        .env_remove("HF_TOKEN")
        .env_remove("HF_TOKEN_PATH")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run weightscope")
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A two-shard affine 4-bit model written by MLX's writer, with its index
/// and config.
fn model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let recipe = Recipe::of(QuantMode::Affine, 4);
    convert(dir.path(), recipe, |_| Some(recipe), true);
    dir
}

/// `inspect --json` without what names where it was read (path, commit).
fn without_location(mut v: Value) -> Value {
    let object = v.as_object_mut().expect("object");
    object.remove("path");
    object.remove("commit");
    v
}

fn count(hub: &Hub, host: &str) -> usize {
    hub.log().iter().filter(|l| l.host == host).count()
}

/// Body bytes the storage host sent.
fn fetched_from_storage(hub: &Hub) -> u64 {
    hub.log()
        .iter()
        .filter(|l| l.host == "storage")
        .map(|l| l.body_bytes)
        .sum()
}

/// The model of [`model`] served as `org/model`, its headers already in a
/// fresh cache, the log cleared: what a tensor read costs alone.
fn served_model() -> (tempfile::TempDir, Hub, tempfile::TempDir) {
    let dir = model();
    let hub = Hub::start();
    hub.add("org/model", dir.path(), Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    weightscope(&hub, cache.path(), &["inspect", "hf://org/model"], &[]);
    hub.clear();
    (dir, hub, cache)
}

#[test]
fn a_hub_repo_inspects_as_the_local_folder_in_one_request_per_shard_and_one_when_cached() {
    let _lock = common::mlx_memory_lock();
    let dir = model();
    let hub = Hub::start();
    hub.add("org/model", dir.path(), Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    let local = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", &dir.path().to_string_lossy(), "--json"],
        &[],
    ));
    let remote_out = weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/model", "--json"],
        &[],
    );
    let remote = json_of(&remote_out);
    common::assert_inspect_schema(&remote);
    let strip = without_location;
    assert_eq!(remote["path"], "hf://org/model");
    assert_eq!(remote["commit"], common::hub::COMMIT, "the commit read at");
    assert_eq!(
        strip(remote.clone()),
        strip(local.clone()),
        "every figure as on the disk"
    );
    // The API, the index, config.json and one range per shard (two shards),
    // each range sent on to storage once by a 302.
    let shards = local["shards"].as_array().expect("shards").len();
    assert_eq!(shards, 2);
    assert!(count(&hub, "hub") <= shards + 3, "{:#?}", hub.log());
    let ranges: Vec<_> = hub
        .log()
        .into_iter()
        .filter(|l| l.host == "storage" && l.path.ends_with(".safetensors"))
        .collect();
    assert_eq!(ranges.len(), shards, "{ranges:#?}");
    assert!(
        ranges
            .iter()
            .all(|l| l.range.as_deref() == Some("bytes=0-99999"))
    );
    // A second open of the same commit: only the API is asked.
    hub.clear();
    let again = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/model", "--json"],
        &[],
    ));
    assert_eq!(strip(again), strip(local));
    let log = hub.log();
    assert_eq!(log.len(), 1, "{log:#?}");
    assert!(log[0].path.starts_with("/api/models/org/model"));
}

#[test]
fn with_hf_hub_offline_a_repo_opened_before_opens_from_the_cache_without_a_request() {
    let _lock = common::mlx_memory_lock();
    let (dir, hub, cache) = served_model();
    let offline = [("HF_HUB_OFFLINE", "1")];
    let local = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", &dir.path().to_string_lossy(), "--json"],
        &[],
    ));
    hub.clear();
    let remote = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/model", "--json"],
        &offline,
    ));
    assert_eq!(
        remote["commit"],
        common::hub::COMMIT,
        "the commit last seen"
    );
    assert_eq!(without_location(remote), without_location(local.clone()));
    assert!(hub.log().is_empty(), "{:#?}", hub.log());
    // A repo never opened online: one line naming the setting and the repo.
    let out = weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/other"],
        &[("HF_HUB_OFFLINE", "true")],
    );
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains("HF_HUB_OFFLINE") && said.contains("org/other"),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    // Values are not kept: reading one says so, and nothing is requested.
    let name = local["tensors"][0]["name"].as_str().expect("a tensor name");
    let out = weightscope(
        &hub,
        cache.path(),
        &["tensor", "hf://org/model", name],
        &offline,
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("HF_HUB_OFFLINE"), "{}", stderr(&out));
    assert!(hub.log().is_empty(), "{:#?}", hub.log());
    // `0` is not offline: the Hub is asked again.
    let out = weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/model"],
        &[("HF_HUB_OFFLINE", "0")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(count(&hub, "hub"), 1, "{:#?}", hub.log());
}

#[test]
fn a_header_longer_than_the_first_read_costs_one_more_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tensors: Vec<Tensor> = (0..2500)
        .map(|i| {
            Tensor::f32(
                &format!("model.layers.{i}.a_rather_long_module_name.with_a_long_path.weight"),
                &[1],
                &[i as f32],
            )
        })
        .collect();
    write_safetensors(&dir.path().join("model.safetensors"), &tensors);
    let hub = Hub::start();
    hub.add("org/big", dir.path(), Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    let out = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/big@main", "--json"],
        &[],
    ));
    assert_eq!(out["tensor_count"], 2500);
    assert!(out["shards"][0]["header_bytes"].as_u64().expect("bytes") > 100_000);
    let ranges: Vec<_> = hub
        .log()
        .into_iter()
        .filter(|l| l.host == "storage")
        .map(|l| l.range)
        .collect();
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0].as_deref(), Some("bytes=0-99999"));
    assert!(
        ranges[1]
            .as_deref()
            .is_some_and(|r| r.starts_with("bytes=100000-"))
    );
}

#[test]
fn a_private_repo_says_how_to_give_a_token_and_the_token_never_goes_to_storage() {
    let _lock = common::mlx_memory_lock();
    let dir = model();
    let hub = Hub::start();
    hub.add("org/private", dir.path(), Behaviour::Private);
    let cache = tempfile::tempdir().expect("cache");
    let refused = weightscope(&hub, cache.path(), &["inspect", "hf://org/private"], &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains("HTTP 401")
            && message.contains("HF_TOKEN")
            && message.contains("hf://org/private"),
        "{message}"
    );
    assert_eq!(message.trim().lines().count(), 1, "{message}");
    hub.clear();
    // The token from huggingface_hub's token file (HF_HOME/token).
    let home = cache.path().join("hf-home");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(home.join("token"), format!("{TOKEN}\n")).expect("token");
    let out = weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/private", "--json"],
        &[("HF_HOME", &home.to_string_lossy())],
    );
    assert_eq!(
        json_of(&out)["tensor_count"].as_u64().map(|n| n > 0),
        Some(true)
    );
    let log = hub.log();
    assert!(
        log.iter().filter(|l| l.host == "hub").all(|l| l.authorized),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .filter(|l| l.host == "storage")
            .all(|l| !l.authorized),
        "{log:#?}"
    );
    assert!(!stderr(&out).contains(TOKEN));
}

#[test]
fn missing_repos_silent_servers_and_cut_bodies_are_one_line_errors() {
    let _lock = common::mlx_memory_lock();
    let dir = model();
    let hub = Hub::start();
    hub.add("org/hangs", dir.path(), Behaviour::Hangs);
    hub.add("org/cut", dir.path(), Behaviour::Truncated);
    let cache = tempfile::tempdir().expect("cache");
    let fast = [
        ("WEIGHTSCOPE_HTTP_TIMEOUT", "1"),
        ("WEIGHTSCOPE_HTTP_RETRIES", "1"),
    ];
    let cases = [
        ("hf://org/nothing", "HTTP 404"),
        ("hf://org/hangs", "stopped answering"),
        ("hf://org/cut", "truncated answer"),
        ("hf://org/hangs/sub", "no .safetensors files"),
    ];
    for (address, expected) in cases {
        let out = weightscope(&hub, cache.path(), &["inspect", address], &fast);
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{address}: {message}");
        assert!(message.contains(expected), "{address}: {message}");
        assert_eq!(message.trim().lines().count(), 1, "{address}: {message}");
    }
    // The cut index was asked for again once (the retry).
    let cut: Vec<_> = hub
        .log()
        .into_iter()
        .filter(|l| l.host == "storage" && l.path == "/org/cut/model.safetensors.index.json")
        .collect();
    assert_eq!(cut.len(), 2, "{cut:#?}");
}

#[test]
fn a_tensor_of_a_hub_repo_fetches_its_own_bytes_and_shows_the_local_values() {
    let _lock = common::mlx_memory_lock();
    let dir = model();
    let hub = Hub::start();
    hub.add("org/model", dir.path(), Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    let name = "model.layers.0.mlp.down_proj.weight";
    let local = json_of(&weightscope(
        &hub,
        cache.path(),
        &["tensor", &dir.path().to_string_lossy(), name, "--json"],
        &[],
    ));
    weightscope(&hub, cache.path(), &["inspect", "hf://org/model"], &[]);
    hub.clear();
    let remote = json_of(&weightscope(
        &hub,
        cache.path(),
        &["tensor", "hf://org/model", name, "--json"],
        &[],
    ));
    for key in [
        "stats",
        "histogram",
        "first",
        "shape",
        "dtype",
        "decoded",
        "quantized",
    ] {
        assert_eq!(remote[key], local[key], "{key}");
    }
    // Headers from the cache; the weight, its scales and biases by range.
    let checkpoint = weightscope::checkpoint::Checkpoint::open(dir.path()).expect("open");
    let module = name.strip_suffix(".weight").expect("weight");
    let wanted: u64 = ["weight", "scales", "biases"]
        .iter()
        .map(|part| {
            checkpoint
                .tensor(&format!("{module}.{part}"))
                .expect("part")
                .bytes()
        })
        .sum();
    let fetched = fetched_from_storage(&hub);
    assert_eq!(fetched, wanted, "{:#?}", hub.log());
}

#[test]
fn a_file_url_inspects_with_one_range_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_safetensors(
        &dir.path().join("one.safetensors"),
        &[Tensor::f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0])],
    );
    let hub = Hub::start();
    hub.add("org/files", dir.path(), Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    let url = format!("{}/org/files/one.safetensors", hub.storage);
    let out = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", &url, "--json"],
        &[],
    ));
    assert_eq!(out["tensor_count"], 1);
    assert_eq!(out["layout"], "file");
    assert_eq!(hub.log().len(), 1, "{:#?}", hub.log());
}

/// A GGUF file in a Hub repo (written by gguf-py): `inspect` gives the
/// local report, read by range requests that grow until the header ends,
/// one request when cached; a tensor's values equal the local ones; a
/// folder of GGUF files says which to name.
#[test]
fn a_gguf_file_in_a_hub_repo_reads_as_the_local_file() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    common::run_venv_writer("tests/gguf/write_gguf.py", dir.path());
    let hub = Hub::start();
    hub.add("org/gguf", dir.path(), Behaviour::Normal);
    let cache = tempfile::tempdir().expect("cache");
    let local_file = dir.path().join("mixed.gguf");
    let local = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "--json", &local_file.to_string_lossy()],
        &[],
    ));
    let address = "hf://org/gguf/mixed.gguf";
    let remote = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "--json", address],
        &[],
    ));
    common::assert_inspect_schema(&remote);
    assert_eq!(remote["commit"], common::hub::COMMIT, "the commit read at");
    let strip = |mut v: Value| {
        let fields = v.as_object_mut().expect("object");
        fields.remove("path");
        fields.remove("commit");
        v
    };
    assert_eq!(
        strip(remote),
        strip(local),
        "the same report as the local file"
    );
    let ranges = hub.log().iter().filter(|l| l.host == "storage").count();
    assert!(ranges >= 1, "{:#?}", hub.log());
    hub.clear();
    json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "--json", address],
        &[],
    ));
    assert_eq!(hub.log().len(), 1, "cached: the API only: {:#?}", hub.log());
    let name = "blk.0.ffn_down.weight";
    let local_t = json_of(&weightscope(
        &hub,
        cache.path(),
        &["tensor", "--json", &local_file.to_string_lossy(), name],
        &[],
    ));
    let remote_t = json_of(&weightscope(
        &hub,
        cache.path(),
        &["tensor", "--json", address, name],
        &[],
    ));
    for key in ["stats", "histogram", "first", "shape", "dtype", "quantized"] {
        assert_eq!(remote_t[key], local_t[key], "{key}");
    }
    let folder = weightscope(&hub, cache.path(), &["inspect", "hf://org/gguf"], &[]);
    let message = stderr(&folder);
    assert_eq!(folder.status.code(), Some(2), "{message}");
    assert!(
        message.contains("GGUF files") && message.contains("hf://org/gguf/"),
        "{message}"
    );
}

/// A walk of a Hub repo reads every tensor once by range requests: the
/// bytes fetched are the tensors' bytes, as the headers count them.
#[test]
fn a_walk_of_a_hub_repo_fetches_each_tensor_once() {
    let _lock = common::mlx_memory_lock();
    let (dir, hub, cache) = served_model();
    let out = json_of(&weightscope(
        &hub,
        cache.path(),
        &[
            "walk",
            "hf://org/model",
            "--policy",
            "release-shard",
            "--json",
        ],
        &[],
    ));
    assert_eq!(out["steps_done"], out["tensors"], "{out}");
    assert!(out["error"].is_null(), "{out}");
    assert_each_tensor_fetched_once(&hub, dir.path());
}

/// A diff of a Hub repo against the same files on the disk streams each
/// tensor once from the Hub and finds nothing changed.
#[test]
fn a_diff_against_a_hub_repo_finds_the_local_files_unchanged() {
    let _lock = common::mlx_memory_lock();
    let (dir, hub, cache) = served_model();
    let local = dir.path().to_string_lossy().into_owned();
    let out = json_of(&weightscope(
        &hub,
        cache.path(),
        &["diff", "--json", &local, "hf://org/model"],
        &[],
    ));
    for key in ["only_in_a", "only_in_b", "failed", "changed"] {
        assert_eq!(out[key].as_array().map(Vec::len), Some(0), "{key}: {out}");
    }
    assert!(
        out["common"]
            .as_array()
            .is_some_and(|c| c.iter().all(|t| t["max_abs_diff"] == 0.0))
    );
    assert_each_tensor_fetched_once(&hub, dir.path());
}

/// The storage served every tensor byte of the model in `dir` exactly once.
fn assert_each_tensor_fetched_once(hub: &Hub, dir: &std::path::Path) {
    let checkpoint = weightscope::checkpoint::Checkpoint::open(dir).expect("open");
    assert_eq!(
        fetched_from_storage(hub),
        checkpoint.summary().total_bytes,
        "{:#?}",
        hub.log()
    );
}

/// Over a slow link (every answer 20 ms late) the headers of a 64-shard
/// repo are fetched many at once, never more than the bound (32 fetching
/// threads, one request each), and read as the local folder is.
#[test]
fn a_slow_link_keeps_many_header_requests_in_flight_within_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    for shard in 0..64 {
        write_safetensors(
            &dir.path()
                .join(format!("model-{:05}-of-00064.safetensors", shard + 1)),
            &[Tensor::f32(
                &format!("layers.{shard}.w"),
                &[2, 2],
                &[1.0; 4],
            )],
        );
    }
    let hub = Hub::start();
    hub.add("org/many", dir.path(), Behaviour::Normal);
    hub.set_delay(std::time::Duration::from_millis(20));
    let cache = tempfile::tempdir().expect("cache");
    let remote = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", "hf://org/many", "--json"],
        &[],
    ));
    let peak = hub.peak_in_flight();
    assert!(
        (9..=32).contains(&peak),
        "{peak} requests at once: more than the old 8, at most 32"
    );
    let local = json_of(&weightscope(
        &hub,
        cache.path(),
        &["inspect", &dir.path().to_string_lossy(), "--json"],
        &[],
    ));
    assert_eq!(without_location(remote), without_location(local));
}
