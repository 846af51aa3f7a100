//! Issue #44: who holds MLX memory at a job's peak. Real Python jobs
//! (`tests/record/held_jobs.py`), each keeping 64 MiB of MLX arrays in a
//! known place, recorded by `weightscope record`: the root's name, kind and
//! bytes (within 5 %) in `held_by`, and in words in the findings.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const MIB: u64 = 1 << 20;
const HELD: u64 = 64 * MIB;

fn held_jobs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/held_jobs.py")
}

/// Records `held_jobs.py MODE` (through `sh -c PREFIX` when given) and
/// returns its output and summary.
fn record(mode: &str, prefix: Option<&str>) -> (Output, Value) {
    record_with(mode, prefix, &[])
}

fn record_with(mode: &str, prefix: Option<&str>, extra: &[&Path]) -> (Output, Value) {
    record_on(&common::venv_python(), mode, prefix, extra)
}

fn record_on(python: &Path, mode: &str, prefix: Option<&str>, extra: &[&Path]) -> (Output, Value) {
    let dir = tempfile::tempdir().expect("dir");
    let json = dir.path().join("summary.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weightscope"));
    cmd.args(["record", "--interval-ms", "20", "--json"])
        .arg(&json)
        .arg("--");
    if let Some(prefix) = prefix {
        cmd.args(["sh", "-c", prefix, "sh"]);
    }
    cmd.arg(python).arg(held_jobs()).arg(mode).args(extra);
    let output = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .expect("runs");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap_or_default()).unwrap_or(Value::Null);
    (output, summary)
}

/// Runs `held_jobs.py MODE PROBE_DIR` (a job that imports the probe
/// itself and calls it directly), which must succeed and print `said`.
fn run_with_the_probe(mode: &str, said: &str) {
    let output = Command::new(common::venv_python())
        .arg(held_jobs())
        .arg(mode)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/probe"))
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(said),
        "{mode}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn near(bytes: u64, expected: u64) -> bool {
    bytes.abs_diff(expected) * 20 <= expected
}

/// The root named `name` in `roots`, which must be of `kind` and hold
/// about `bytes`.
fn assert_root(roots: &Value, name: &str, kind: &str, bytes: u64) {
    let all = roots.as_array().expect("held_by is a list");
    let root = all
        .iter()
        .find(|r| r["root"] == name)
        .unwrap_or_else(|| panic!("no root `{name}` in {roots:#}"));
    assert_eq!(root["kind"], kind, "{root:#}");
    let held = root["bytes"].as_u64().expect("bytes");
    assert!(
        near(held, bytes),
        "`{name}` holds {held}, not about {bytes}: {root:#}"
    );
    assert!(
        root["path"].as_str().is_some_and(|p| !p.is_empty()),
        "an example path: {root:#}"
    );
}

/// Records `held_jobs.py MODE`, which must exit 0; its summary and the
/// recorder's stderr.
fn recorded(mode: &str) -> (Value, String) {
    let (output, summary) = record(mode, None);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{mode}: {stderr}");
    (summary, stderr)
}

fn check(mode: &str, name: &str, kind: &str) -> Value {
    let (summary, stderr) = recorded(mode);
    assert_root(&summary["held_by"], name, kind, HELD);
    // What was reached is MLX active memory then: nothing unexplained.
    let walk = &summary["held_by_walk"];
    let unreached = walk["unreached_bytes"].as_u64().expect("unreached");
    assert!(unreached * 20 <= HELD, "{mode}: {walk:#}");
    assert!(
        stderr.contains(&format!("held by `{name}`")),
        "{mode}: {stderr}"
    );
    summary
}

#[test]
fn a_list_local_of_the_fold_is_named_with_its_function_and_the_allocating_line() {
    let summary = check("fold", "kept", "local");
    let root = &summary["held_by"][0];
    assert_eq!(root["function"], "fold");
    assert_eq!(root["type"], "list");
    assert_eq!(root["arrays"], 16);
    let finding = summary["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["message"].as_str())
        .find(|t| t.contains("held by `kept`"))
        .expect("a finding names the root");
    assert!(
        finding.contains("The line that allocated it: held_jobs.py:"),
        "{finding}"
    );
}

#[test]
fn a_module_level_cache_dict_is_a_global() {
    check("global", "CACHE", "global");
}

#[test]
fn an_instance_attribute_is_named_as_an_attribute() {
    check("attribute", "self.cache", "attribute");
}

#[test]
fn a_closure_over_a_dict_is_a_closure() {
    check(
        "closure",
        "make_keeper.<locals>.keep (closure over kept)",
        "closure",
    );
}

#[test]
fn a_default_argument_is_a_default() {
    check("default", "remember (default seen)", "default");
}

#[test]
fn an_exception_kept_after_its_except_block_holds_its_frames_locals() {
    check("exception", "saved", "traceback");
}

#[test]
fn a_suspended_generator_holds_its_locals() {
    check("generator", "gen", "generator");
}

#[test]
fn a_generator_is_said_to_hold_through_the_list_it_keeps_not_its_last_yield() {
    let summary = check("yielding", "gen", "generator");
    let root = summary["held_by"]
        .as_array()
        .expect("roots")
        .iter()
        .find(|r| r["root"] == "gen")
        .expect("gen");
    let path = root["path"].as_str().expect("path");
    assert!(
        path.starts_with("gen.<suspended pending_outputs>["),
        "{root:#}"
    );
}

#[test]
fn the_load_mark_and_the_exception_hook_run_none_of_the_jobs_methods() {
    let dir = tempfile::tempdir().expect("dir");
    let marker = dir.path().join("ran");
    let output = Command::new(common::venv_python())
        .arg(held_jobs())
        .arg("no-job-code")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/probe"))
        .arg(&marker)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("no job code"),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !marker.exists(),
        "the probe ran the job's code: {:?}",
        std::fs::read_to_string(&marker)
    );
}

#[test]
fn walks_take_at_most_one_percent_of_the_jobs_time() {
    run_with_the_probe("walk-share", "walk share 2");
}

#[test]
fn arrays_reached_from_two_roots_are_counted_once_for_the_first() {
    let summary = check("two-roots", "first", "local");
    let second = summary["held_by"]
        .as_array()
        .expect("roots")
        .iter()
        .find(|r| r["root"] == "second")
        .expect("the second root is said");
    assert_eq!(second["bytes"], 0, "{second:#}");
    assert_eq!(second["also"], serde_json::json!(["first"]), "{second:#}");
}

#[test]
fn a_million_small_objects_beside_the_arrays_are_not_walked() {
    let summary = check("objects", "kept", "local");
    let walk = &summary["held_by_walk"];
    // The arrays beside the million objects are found first (containers
    // of over 10,000 items wait), and they account for MLX's memory: the
    // million are never walked, the walk is whole, and cheap enough that
    // the walk when the memory settles comes a second later.
    assert_eq!(walk["partial"], false, "{walk:#}");
    let objects = walk["objects"].as_u64().expect("objects");
    assert!(objects < 100_000, "{walk:#}");
}

#[test]
fn the_walk_never_runs_the_jobs_code() {
    let dir = tempfile::tempdir().expect("dir");
    let marker = dir.path().join("ran");
    let (output, summary) = record_with("proxy", None, &[&marker]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_root(&summary["held_by"], "trap.layers", "attribute", HELD);
    assert!(
        !marker.exists(),
        "the walk ran the job's __getattr__ or __class__: {:?}",
        std::fs::read_to_string(&marker)
    );
}

#[test]
fn a_walk_leaves_every_object_with_the_references_it_had() {
    // The walk called directly (in the main thread, and from another while
    // the main one waits), the garbage collector off: a cycle through the
    // walk's frames would keep the job's arrays alive after it returns (a
    // streaming job then held the last shard while loading the next).
    run_with_the_probe("refs", "refs unchanged 18");
}

/// The walk's figures of `summary`, checked to have counted by buffer with
/// nothing beyond MLX active.
fn counted_by_buffer<'a>(summary: &'a Value, stderr: &str) -> &'a Value {
    let walk = &summary["held_by_walk"];
    assert_eq!(walk["counted_by"], "buffer", "{walk:#}");
    assert_eq!(walk["counted_beyond_active_bytes"], 0, "{walk:#}");
    let unreached = walk["unreached_bytes"].as_u64().expect("unreached");
    assert!(unreached * 20 <= HELD, "{walk:#}");
    assert!(!stderr.contains("more than MLX held"), "{stderr}");
    walk
}

#[test]
fn views_of_one_buffer_are_counted_once() {
    // One 64 MiB array and 16 slices of it: 64 MiB held by `base`; `parts`
    // reaches the same buffer (counted there).
    let (summary, stderr) = recorded("views");
    assert_root(&summary["held_by"], "base", "local", HELD);
    let walk = counted_by_buffer(&summary, &stderr);
    assert!(
        near(walk["shared_bytes"].as_u64().expect("shared"), HELD),
        "{walk:#}"
    );
    let parts = summary["held_by"]
        .as_array()
        .expect("roots")
        .iter()
        .find(|r| r["root"] == "parts")
        .expect("parts");
    assert_eq!(parts["bytes"], 0, "{parts:#}");
    assert_eq!(parts["also"][0], "base", "{parts:#}");
    assert!(
        stderr.contains("counted by buffer: views of one buffer counted once (64.00 MiB shared)"),
        "{stderr}"
    );
}

#[test]
fn reshapes_slices_transposes_and_broadcasts_count_their_buffer_once() {
    // Issue #57: arrays each kept with a reshape and a slice of itself were
    // said to hold the sum of their sizes. Here 16 arrays of 4 MiB with a
    // reshape, a half slice and a transpose each (160 MiB by size) and a
    // 16 MiB broadcast of one row: 64 MiB of buffers.
    let (summary, stderr) = recorded("reshaped");
    assert_root(&summary["held_by"], "kept", "local", HELD);
    counted_by_buffer(&summary, &stderr);
}

#[test]
fn arrays_not_evaluated_yet_hold_nothing() {
    // 16 evaluated arrays kept, and 16 products of them never evaluated:
    // `doubled` holds no buffer (it is not a root at all); the walk says
    // how many arrays it counted as none.
    let (summary, stderr) = recorded("unevaluated");
    assert_root(&summary["held_by"], "kept", "local", HELD);
    let walk = counted_by_buffer(&summary, &stderr);
    assert_eq!(walk["unevaluated_arrays"], 16, "{walk:#}");
    assert_eq!(walk["unevaluated_bytes"], HELD, "{walk:#}");
    let roots = summary["held_by"].as_array().expect("roots");
    assert!(roots.iter().all(|r| r["root"] != "doubled"), "{roots:?}");
    assert!(
        stderr.contains(
            "16 arrays not evaluated yet (64.00 MiB by their size) counted as holding nothing"
        ),
        "{stderr}"
    );
}

#[test]
fn ten_mib_of_arrays_in_a_list_beside_the_weights_are_not_walked_and_said_not_looked_for() {
    let (summary, stderr) = recorded("small-list");
    let walk = &summary["held_by_walk"];
    assert_eq!(walk["shallow"], true, "{walk:#}");
    assert!(
        walk["objects"].as_u64().expect("objects") < 20_000,
        "{walk:#}"
    );
    assert_root(&summary["held_by"], "kept", "local", HELD);
    let roots = summary["held_by"].as_array().expect("roots");
    let last = roots.last().expect("a root");
    assert_eq!(last["kind"], "unwalked", "{roots:?}");
    assert_eq!(last["root"], "not looked for", "{roots:?}");
    assert!(
        near(last["bytes"].as_u64().expect("bytes"), 10_240_000),
        "{roots:?}"
    );
    assert!(
        stderr.contains("not looked for (under 16.00 MiB"),
        "{stderr}"
    );
}

#[test]
fn a_job_under_sixteen_mib_of_mlx_memory_is_not_walked_and_says_so() {
    let (summary, stderr) = recorded("small");
    assert!(summary["held_by_walk"].is_null(), "{summary:#}");
    assert!(
        stderr.contains("held by: no walk: MLX active stayed under 16.00 MiB"),
        "{stderr}"
    );
}

#[test]
fn with_another_thread_running_views_are_counted_each_and_said_to_be() {
    // Reading MLX's graph while another thread may evaluate is a data race
    // in MLX: the walk counts by array then, and says so.
    let (summary, stderr) = recorded("views-threaded");
    assert_root(&summary["held_by"], "base", "local", HELD);
    let walk = &summary["held_by_walk"];
    assert_eq!(walk["counted_by"], "array", "{walk:#}");
    assert_eq!(walk["counted_by_array_why"], "threads", "{walk:#}");
    let beyond = walk["counted_beyond_active_bytes"].as_u64().expect("bytes");
    assert!(near(beyond, HELD), "{walk:#}");
    assert!(
        stderr.contains("64.00 MiB more than MLX held: arrays that share a buffer"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the job had other threads running"),
        "{stderr}"
    );
    // The finding that names the first root says so too.
    assert!(
        stderr.contains("(In this walk, the roots' arrays add up to 64.00 MiB more"),
        "{stderr}"
    );
}

#[test]
fn a_threads_local_is_named_while_the_main_thread_waits_in_join() {
    let summary = check("thread", "held", "local");
    let root = summary["held_by"]
        .as_array()
        .expect("held_by")
        .iter()
        .find(|r| r["root"] == "held")
        .expect("held");
    assert_eq!(root["function"], "worker", "{root:#}");
}

#[test]
fn a_job_killed_for_memory_says_what_held_it_at_the_last_walk() {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(path) = own
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))
    else {
        eprintln!("skipped: no cgroup v1 memory controller here");
        return;
    };
    let cgroup = Path::new("/sys/fs/cgroup/memory")
        .join(path.trim_start_matches('/'))
        .join(format!("weightscope-held-{}", std::process::id()));
    if std::fs::create_dir(&cgroup).is_err() {
        eprintln!("skipped: no writable cgroup v1 memory controller here");
        return;
    }
    let limit = 200 * MIB;
    std::fs::write(cgroup.join("memory.limit_in_bytes"), limit.to_string()).expect("limit");
    let _ = std::fs::write(
        cgroup.join("memory.memsw.limit_in_bytes"),
        limit.to_string(),
    );
    let prefix = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cgroup.display());
    let (output, summary) = record("killed", Some(&prefix));
    let _ = std::fs::remove_dir(&cgroup);
    assert_ne!(output.status.code(), Some(0), "the job was killed");
    let killed = &summary["killed"];
    assert!(killed.is_object(), "{summary:#}");
    assert_root(&killed["held_by"], "kept", "local", HELD);
    let more = killed["held_by"]
        .as_array()
        .expect("roots")
        .iter()
        .find(|r| r["root"] == "more")
        .expect("the growing list is a root");
    assert_eq!(more["kind"], "local");
    // Asked for near the limit: the last walk is close to the kill (the
    // job grew 400 MiB a second; a walk a second would have missed it).
    let more_bytes = more["bytes"].as_u64().expect("bytes");
    assert!(more_bytes >= 32 * MIB, "{more:#}");
}

#[test]
fn a_walk_asked_for_while_the_job_runs_arrives() {
    use weightscope::profile::capture::{JobSpec, RecordControl, RecordOptions, Target, Update};
    use weightscope::profile::trace::stacks::StackUpdate;
    let dir = tempfile::tempdir().expect("dir");
    let go = dir.path().join("go");
    assert!(
        Command::new("mkfifo")
            .arg(&go)
            .status()
            .expect("mkfifo")
            .success()
    );
    // Holds 64 MiB, says so, and waits for the test (no second high, and
    // no settled walk before the test lets it go: it waits on the FIFO).
    let script = format!(
        "import mlx.core as mx\nx = [mx.ones((1 << 20,)) for _ in range(16)]\nmx.eval(x)\nprint('ready', flush=True)\nopen({:?}).read()\n",
        go.display().to_string()
    );
    let target = Target::Spawn(JobSpec {
        capture_output: true,
        argv: vec![common::venv_python().into(), "-c".into(), script.into()],
        cwd: None,
        env: vec![],
    });
    let options = RecordOptions {
        interval: std::time::Duration::from_millis(20),
        checkpoint: None,
        python_probe: true,
    };
    let control = RecordControl::new();
    let asked = control.clone();
    // Without asking, this job gets two walks: at its high, and once more
    // when memory has stayed there a second; then none. Asked after those
    // two, a third.
    let mut walks = 0;
    let mut ready = false;
    let mut released = false;
    let started = std::time::Instant::now();
    let recording = weightscope::profile::capture::record(&target, &options, &control, |update| {
        match &update {
            Update::Output(line) if line.text == "ready" => ready = true,
            Update::Stacks(StackUpdate::Held(_)) => {
                walks += 1;
                if walks == 2 {
                    asked.ask_for_walk();
                }
            }
            _ => {}
        }
        // Let the job go once the third walk came (or, as a watchdog,
        // after a minute: then the assertion below fails).
        let overdue = started.elapsed() > std::time::Duration::from_mins(1);
        if !released && ready && (walks >= 3 || overdue) {
            released = true;
            let _ = std::fs::write(&go, b"go");
        }
    })
    .expect("recorded");
    assert!(walks >= 3, "{walks} walks: the one asked for did not come");
    let walk = recording.held_by.expect("a walk at the peak");
    assert_root(
        &serde_json::to_value(&walk.roots).expect("JSON"),
        "x",
        "global",
        HELD,
    );
}

// Issue #57: a probe the job cannot notice.

#[test]
fn a_walk_under_a_pure_python_profiler_leaves_the_jobs_locals_bound() {
    // Python 3.11 writes a frame's f_locals dict back into the frame after
    // a profile callback: emptied by the walk, `kept` became unbound.
    let (output, summary) = record("profiled", None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("profiled, kept bound: 16"), "{stdout}");
    assert_root(&summary["held_by"], "kept", "local", HELD);
}

#[test]
fn the_jobs_tracer_never_sees_the_probes_frames() {
    let (output, summary) = record("traced", None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        summary["held_by_walk"]["objects"].as_u64().unwrap_or(0) > 0,
        "a walk ran: {summary:#}"
    );
    // The job's loop: about 30 sleeps, a few events each. A walk traced
    // would add an event for each of its lines (hundreds of thousands).
    let events: u64 = stdout
        .split("traced events: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the job's count");
    assert!(events < 2000, "the job's tracer saw {events} events");
}

#[test]
fn the_walk_reads_containers_keys_and_namespaces_only_through_built_in_slots() {
    let dir = tempfile::tempdir().expect("dir");
    let marker = dir.path().join("ran");
    let (output, summary) = record_with("hostile-objects", None, &[&marker]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !marker.exists(),
        "the walk ran the job's code: {:?}",
        std::fs::read_to_string(&marker)
    );
    // Four arrays each: a dict subclass under str-subclass keys, a list
    // subclass, a deque and a partial (read through the collector).
    for name in ["table", "rows", "queue", "later"] {
        assert_root(&summary["held_by"], name, "local", HELD / 4);
    }
    // Through the ctypes, struct and io functions and MLX's counters the
    // job replaced: the probe's own, bound when it started (MLX's when
    // mlx.core was imported), and every sample still read MLX's memory.
    assert!(
        summary["peak_mlx_active_bytes"].as_u64() >= Some(HELD),
        "{summary:#}"
    );
    assert_eq!(
        summary["held_by_walk"]["counted_by"], "buffer",
        "{summary:#}"
    );
}

#[test]
fn a_four_megabyte_key_over_a_thousand_arrays_costs_no_gigabytes() {
    let (output, summary) = record("long-key", None);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_root(&summary["held_by"], "cache", "local", HELD + 4 * MIB);
    let peak = summary["peak_rss_bytes"].as_u64().expect("peak RSS");
    assert!(
        peak < 1 << 30,
        "peak RSS {peak} (a path per array held the key)"
    );
    let roots = summary["held_by"].as_array().expect("roots");
    assert!(
        roots
            .iter()
            .all(|r| r["path"].as_str().unwrap_or("").len() <= 300),
        "{roots:?}"
    );
}

#[test]
fn frozen_clocks_and_a_mocked_sleep_leave_the_probes_own() {
    let (output, summary) = record("frozen-clocks", None);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_root(&summary["held_by"], "kept", "local", HELD);
    let walk = &summary["held_by_walk"];
    assert!(
        walk["millis"].as_f64().unwrap_or(0.0) > 0.0,
        "the walk timed itself: {walk:#}"
    );
    // The sampler sleeps its interval (20 ms): not a line per spin.
    let lines = summary["probe_info"]["lines"].as_u64().expect("lines");
    let secs = summary["elapsed_secs"].as_f64().expect("elapsed");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let most = (secs / 0.02 * 2.0) as u64 + 300;
    assert!(lines <= most, "{lines} probe lines in {secs} s");
}

#[test]
fn pending_collectives_stay_bounded_and_eval_is_wrapped_only_when_used() {
    run_with_the_probe("collectives", "pending 1");
}

/// The Pythons pyenv has here (3.11, 3.12, 3.13), for the stand-in walk.
fn pyenv_pythons() -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for minor in ["3.11", "3.12", "3.13"] {
        let Ok(entries) = std::fs::read_dir(home.join("versions")) else {
            continue;
        };
        let mut versions: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{minor}.")))
            })
            .collect();
        versions.sort();
        if let Some(python) = versions.last().map(|v| v.join("bin/python"))
            && python.exists()
        {
            found.push(python);
        }
    }
    found
}

#[test]
fn the_walk_reads_locals_on_python_3_11_3_12_and_3_13_under_a_profiler() {
    let pythons = pyenv_pythons();
    if pythons.is_empty() {
        eprintln!("skipped: no pyenv Pythons here");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/record/stand_in_walk.py");
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/probe");
    for python in pythons {
        let output = Command::new(&python)
            .arg(&script)
            .arg(&probe)
            .output()
            .expect("runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("walked"),
            "{}: {stdout}{}",
            python.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn held_by_names_its_roots_with_real_mlx_on_python_3_12_and_3_13() {
    // `mlx-glue/setup test` makes a venv with the pinned MLX for each of
    // 3.12 and 3.13 where the machine has them (3.13's frame locals are a
    // proxy, read and never emptied).
    let glue = Path::new(env!("CARGO_MANIFEST_DIR")).join("mlx-glue");
    let mut ran = 0;
    for minor in ["3.12", "3.13"] {
        let python = glue.join(format!("test-venv-{minor}/bin/python"));
        if !python.exists() {
            eprintln!(
                "skipped Python {minor}: no {} (no Python {minor} here)",
                python.display()
            );
            continue;
        }
        ran += 1;
        for (mode, name, kind) in [
            ("fold", "kept", "local"),
            ("profiled", "kept", "local"),
            ("yielding", "gen", "generator"),
            ("attribute", "self.cache", "attribute"),
            ("reshaped", "kept", "local"),
        ] {
            let (output, summary) = record_on(&python, mode, None, &[]);
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert_eq!(
                output.status.code(),
                Some(0),
                "{minor} {mode}: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            if mode == "profiled" {
                assert!(
                    stdout.contains("profiled, kept bound: 16"),
                    "{minor}: {stdout}"
                );
            }
            assert_root(&summary["held_by"], name, kind, HELD);
            if mode == "reshaped" {
                counted_by_buffer(&summary, &String::from_utf8_lossy(&output.stderr));
            }
        }
    }
    if ran == 0 {
        eprintln!("skipped: neither Python 3.12 nor 3.13 here");
    }
}

#[test]
fn the_probes_tables_of_frames_and_stacks_stay_bounded() {
    run_with_the_probe("frames", "frames bounded 100000");
}

#[test]
fn the_count_by_buffer_sends_its_figures_and_never_asks_a_cuda_array_for_its_pointer() {
    run_with_the_probe("buffers", "buffers counted 16 4");
}

#[test]
fn the_walk_stops_at_its_object_budget_whatever_its_clock_says() {
    run_with_the_probe("budget", "budget held 700001 16");
}

#[test]
fn the_probes_json_and_source_lines_match_the_standard_librarys() {
    let count = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/probe/weightscope_probe.py"),
    )
    .expect("probe")
    .lines()
    .count();
    run_with_the_probe(
        "encoded",
        &format!("encoded like the standard library 3 {count}"),
    );
}
