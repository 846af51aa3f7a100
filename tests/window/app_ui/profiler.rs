//! The Profiler tab: walks, recordings of a user's job, traces, runs compared, several hosts merged.

use super::{
    finish_walk, five_tensors, harness, open_app, save_by_path, trace_path, write_eight_shards,
    written,
};
use crate::common;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use weightscope::app::{AppCommand, Dialog, Tab, WeightscopeApp};
use weightscope::mlx;
use weightscope::profile::export::Format;
use weightscope::weights::demo;

#[test]
fn the_profiler_walks_finds_the_trap_and_keeps_the_trace() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_eight_shards(dir.path());
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label("Profiler").click();
    harness.run();
    assert_eq!(crate::hooks(&mut harness).tab(), Tab::Profiler);
    harness.get_by_label_contains("A release-shard walk needs about 2.00 MiB");

    // The trap: release-tensor with the maps alive.
    harness.get_by_label("Policy").click();
    harness.run();
    harness.get_by_label("release-tensor").click();
    harness.run();
    harness.get_by_label_contains("expected peak: 16.00 MiB");
    harness.get_by_label("Run walk").click();
    harness.step();
    harness.step();
    harness.get_by_label("Cancel walk");
    harness.get_by_label_contains("walking release-tensor");
    finish_walk(&mut harness);
    let (outcome, findings) = crate::hooks(&mut harness)
        .last_walk()
        .expect("a finished walk");
    assert_eq!(outcome.steps_done, 16);
    assert!(
        outcome.peak_mlx_active_bytes >= 15 << 20,
        "{}",
        outcome.peak_mlx_active_bytes
    );
    assert!(!findings.is_empty());
    harness.get_by_label_contains("did not lower MLX active memory: the shard map still holds it");
    harness.get_by_label("Run walk");

    // Click the last release in the events table: the moment is selected and
    // the resident list shows the released tensors still held by their maps.
    harness
        .get_all_by_label_contains("release model.layers.7.w1")
        .last()
        .expect("the last release is listed")
        .click();
    harness.run();
    assert!(crate::hooks(&mut harness).selected_moment().is_some());
    harness.get_by_label_contains("s: 16.00 MiB in 8 shards");
    harness
        .get_by_label_contains("model-0.safetensors: 2.00 MiB (2 tensors)")
        .click();
    harness.run();
    assert_eq!(
        harness
            .get_all_by_label_contains("(released, still held by the shard map)")
            .count(),
        2
    );

    // Save the walk's trace by path, then overlay it.
    let out = tempfile::tempdir().expect("tempdir");
    let path = out.path().join("trap.csv");
    save_by_path(&mut harness, &path, dir.path());
    let saved = weightscope::profile::Trace::load(&path).expect("the saved trace loads");
    assert_eq!(
        saved.policy,
        Some(weightscope::memory::Policy::ReleaseTensor)
    );
    harness.get_by_label("Open from path").click();
    harness.step();
    // The trace loads on its own thread; the frames go on meanwhile.
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("x release-tensor none");

    // The fix, overlaid on the trap: no trap finding this time.
    harness.get_by_label("Policy").click();
    harness.run();
    harness.get_by_label("release-shard").click();
    harness.run();
    harness.get_by_label("Run walk").click();
    harness.step();
    finish_walk(&mut harness);
    let (outcome, findings) = crate::hooks(&mut harness)
        .last_walk()
        .expect("a finished walk");
    assert!(outcome.peak_mlx_active_bytes <= (2 << 20) + (2 << 20) / 10);
    assert!(
        findings.iter().all(
            |f| f.code != weightscope::profile::FindingKind::ReleaseFreedNothing
                && f.code != weightscope::profile::FindingKind::RssDidNotFollow
        ),
        "{findings:?}"
    );
    assert!(
        harness
            .query_by_label_contains("did not lower MLX active memory")
            .is_none()
    );

    // Dialog actions go to the shell; an empty answer is explained.
    harness.get_by_label("Save trace…").click();
    harness.run();
    assert_eq!(harness.state_mut().take_dialogs(), [Dialog::SaveTrace]);
    harness
        .state_mut()
        .picked_for(Dialog::SaveTrace, Vec::new());
    harness.run();
    harness.get_by_label_contains("No file was chosen");

    // A bad limit is explained; a good one reaches MLX.
    harness.get_by_label("MLX memory limit").focus();
    harness.run();
    harness.get_by_label("MLX memory limit").type_text("lots");
    harness.run();
    harness.get_by_label("Set limit").click();
    harness.run();
    harness.get_by_label_contains("the memory limit is a size");
}

/// Runs on every backend: on the CPU here and in CI, on CUDA on the GPU
/// machine (docs/gpu.md), where the labels must say GPU memory.
#[test]
fn the_device_and_memory_series_are_labelled_for_the_backend() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let values: Vec<f32> = (0..64 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
    common::write_safetensors(
        &dir.path().join("m.safetensors"),
        &[common::Tensor::f32("probe.weight", &[64, 64], &values)],
    );
    let device = mlx::default_device().expect("MLX reports its device");
    let gpu = device.kind == mlx::DeviceKind::Gpu;
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label_contains(&device.describe());
    harness.get_by_label_contains("probe.weight").click();
    harness.step();
    crate::hooks(&mut harness)
        .wait_for_worker()
        .expect("materialized");
    harness.run();
    let shown = if gpu {
        format!("{} ({})", device.name(), mlx::GPU_BACKEND)
    } else {
        format!("{} (no GPU: CPU)", device.name())
    };
    harness.get_by_label(&shown);
    assert!(crate::hooks(&mut harness).wait_for_sample());
    harness.run();
    let gpu_note = harness
        .query_by_label_contains("MLX figures are GPU memory")
        .is_some();
    assert_eq!(
        gpu_note, gpu,
        "the strip says RSS is host memory only on a GPU"
    );
    eprintln!("backend checked: {}", device.describe());
}

/// The profiler's "Record a command…": a Python MLX job that keeps every
/// array, recorded live on the recorder thread, its findings in the tab, its
/// recording a trace like a walk's; a bad form says why.
#[test]
#[allow(clippy::too_many_lines)] // one scripted session, read top to bottom
fn the_profiler_records_a_users_job_and_shows_what_it_did() {
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("mlx-glue/test-venv/bin/python");
    assert!(python.exists(), "run `mlx-glue/setup test` first");
    let jobs = root.join("tests/record/jobs.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = dir.path().join("job-checkpoint");
    let made = std::process::Command::new(&python)
        .arg(&jobs)
        .arg("make")
        .arg(&checkpoint)
        .arg("4")
        .status()
        .expect("python runs");
    assert!(made.success());
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();

    // An empty command line: the form says why, nothing starts.
    harness.get_by_label("Record a command…").click();
    harness.run();
    harness.get_by_label("Start").click();
    harness.run();
    harness.get_by_label_contains("type the command to record");
    assert!(!crate::hooks(&mut harness).is_recording());
    // Esc closes the form; the button opens it again.
    harness.key_press(egui::Key::Escape);
    harness.run();
    assert!(
        harness
            .query_by_label("Command line (run by sh -c)")
            .is_none()
    );
    harness.get_by_label("Record a command…").click();
    harness.run();

    let command = crate::typed_line(&[
        python.as_os_str(),
        jobs.as_os_str(),
        "keep".as_ref(),
        checkpoint.as_os_str(),
    ]);
    crate::start_in_form(&mut harness, &command);
    assert!(crate::hooks(&mut harness).is_recording());
    harness.step();
    harness.get_by_label_contains("recording `");
    harness.get_by_label("Stop");
    assert!(crate::hooks(&mut harness).wait_for_recording());
    harness.run();
    assert!(!crate::hooks(&mut harness).is_recording());

    // What it did, in the tab: how it ended, its peaks, the finding.
    harness.get_by_label_contains("exit 0 after");
    harness.get_by_label_contains("peak MLX active");
    harness.get_by_label_contains("the tensors of every shard were kept");
    harness.get_by_label_contains("Shard files the job held open");
    harness.get_by_label_contains("events of the job");
    // The lines: the stack at the peak and the table, from the job's probe.
    harness.get_by_label_contains("At the peak: jobs.py:");
    assert!(
        !harness
            .query_all_by_label_contains(" in keep")
            .collect::<Vec<_>>()
            .is_empty(),
        "keep's lines in the table"
    );
    // A finding selects its moment (the peak): the job's stack then.
    harness
        .get_by_label_contains("the tensors of every shard were kept")
        .click();
    harness.run();
    harness.get_by_label_contains("The job's working stack then");
    harness.get_by_label_contains("files loaded by then (mx.load)");
    let (recording, findings) = crate::hooks(&mut harness)
        .last_recording()
        .expect("a recording");
    assert_eq!(
        recording.exit,
        Some(weightscope::profile::analysis::recording::JobExit::Code(0))
    );
    assert!(
        recording.probe.is_some(),
        "MLX counters from inside the job"
    );
    // The window's own open shards (MLX maps them without close-on-exec)
    // do not leak into the job: its checkpoint is its own.
    assert_eq!(
        recording.checkpoint.as_ref().map(|c| c.path.as_path()),
        Some(checkpoint.as_path())
    );
    assert!(
        recording
            .files_seen
            .iter()
            .all(|f| f.path.starts_with(&checkpoint)),
        "{:?}",
        recording.files_seen
    );
    assert!(
        findings
            .iter()
            .any(|f| f.code == weightscope::profile::FindingKind::JobAccumulated)
    );

    // A recording is a trace like any other.
    let saved = dir.path().join("job.csv");
    harness.state_mut().execute(AppCommand::SaveTrace {
        path: saved.clone(),
        replace: true,
    });
    written(&mut harness);
    let trace = weightscope::profile::Trace::load(&saved).expect("saved trace loads");
    assert_eq!(trace.job.and_then(|j| j.exit_code), Some(0));

    // A command that cannot start: said in the tab, the window goes on.
    crate::record_in_window(&mut harness, "/nonexistent/convert --now");
    // The shell says why, in the job's output pane; the job exited 127.
    harness.get_by_label_contains("exited with status 127");
    harness.get_by_label_contains("/nonexistent/convert: not found");

    // A line as a terminal runs it: `&&` and the job's own output.
    crate::record_in_window(
        &mut harness,
        "true && echo from-the-job && echo to-stderr >&2",
    );
    harness.get_by_label("from-the-job");
    harness.get_by_label("to-stderr");
    harness.get_by_label_contains("Output of the job (last 2 lines)");
}

/// "Attach to process…": a running process followed from outside until it
/// exits, its Python stacks read from its memory; a pid that is not a
/// number is refused by the form.
#[test]
fn the_profiler_attaches_to_a_running_process() {
    use std::io::BufRead as _;
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("mlx-glue/test-venv/bin/python");
    let mut target = std::process::Command::new(&python)
        .arg(root.join("tests/record/jobs.py"))
        .arg("wait")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the target runs");
    let mut ready = String::new();
    std::io::BufReader::new(target.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready");
    assert_eq!(ready.trim(), "ready");
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    harness.get_by_label("Attach to process…").click();
    harness.run();
    harness.get_by_label("Process id").focus();
    harness.run();
    harness.get_by_label("Process id").type_text("forty-two");
    harness.run();
    harness.get_by_label("Attach").click();
    harness.run();
    harness.get_by_label_contains("`forty-two` is not a process id");
    harness.get_by_label("Process id").focus();
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness
        .get_by_label("Process id")
        .type_text(&target.id().to_string());
    harness.run();
    // Measured against a checkpoint named in the form.
    let field = "Checkpoint (empty: the folder of the first shard the job opens)";
    harness.get_by_label(field).focus();
    harness.run();
    harness
        .get_by_label(field)
        .type_text(&demo.to_string_lossy());
    harness.run();
    harness.get_by_label("Attach").click();
    harness.step();
    assert!(crate::hooks(&mut harness).is_recording());
    assert!(crate::hooks(&mut harness).wait_for_recording_started());
    // Closing its stdin ends the target; the recording follows it out.
    drop(target.stdin.take());
    assert!(target.wait().expect("ends").success());
    assert!(crate::hooks(&mut harness).wait_for_recording());
    harness.run();
    let (recording, _) = crate::hooks(&mut harness)
        .last_recording()
        .expect("a recording");
    assert!(recording.attached);
    assert!(recording.exit.is_none());
    assert_eq!(
        recording.checkpoint.as_ref().map(|c| c.path.as_path()),
        Some(demo.as_path())
    );
    assert!(!recording.samples.is_empty());
    // Its stacks were read from outside: where it waited is named.
    assert!(
        recording
            .peak_stack
            .iter()
            .any(|f| f.file.ends_with("jobs.py") && f.function == "<module>"),
        "{:?}",
        recording.peak_stack
    );
    harness.get_by_label_contains("detached after");
    harness.get_by_label_contains("At the peak: jobs.py:");
    harness.get_by_label_contains("MLX not read (attached: stacks read from outside");
}

#[test]
fn a_trace_loads_off_the_ui_thread_and_a_bad_one_says_why() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(Tab::Profiler));
    harness.run();
    let bad = dir.path().join("nope.json");
    harness
        .state_mut()
        .execute(AppCommand::LoadTrace(bad.clone()));
    harness.step(); // frames go on while the thread reads
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    let message = format!("{}", bad.display());
    assert!(harness.query_by_label_contains(&message).is_some());
    assert!(harness.query_by_label_contains("loading").is_none());

    // A good one, before any walk of this session: drawn on its own clock.
    let good = dir.path().join("walk.json");
    let walked = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("walk")
        .arg(&demo)
        .args(["--policy", "release-shard", "--trace"])
        .arg(&good)
        .output()
        .expect("walk runs");
    assert!(walked.status.success());
    harness
        .state_mut()
        .execute(AppCommand::LoadTrace(good.clone()));
    harness.step();
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("overlaid release-shard");
    harness.get_by_label_contains("no walk or job has run in this session");
}

/// The window forks its jobs: the kernel's max-RSS figure for the child
/// counts the window's own pages until the exec, so a large window recording
/// `sleep` must still report the job's own memory, as the CLI does.
#[test]
fn a_job_recorded_from_a_large_window_reports_its_own_memory() {
    use weightscope::profile::capture::{JobSpec, Target};
    let _lock = common::mlx_memory_lock();
    // 256 MiB of this process touched: the window is large.
    let ballast = vec![1u8; 256 << 20];
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = demo::ensure_demo(dir.path()).expect("demo");
    let mut app = open_app(&demo);
    app.execute(AppCommand::Record(
        Target::Spawn(JobSpec {
            argv: vec!["sleep".into(), "0.3".into()],
            ..JobSpec::default()
        }),
        None,
    ));
    assert!(app.hooks().wait_for_recording(), "the recording ran");
    let (recording, _) = app.hooks().last_recording().expect("a recording");
    assert!(
        recording.peak_rss_bytes < 64 << 20,
        "sleep's peak RSS is its own, not the window's {} MiB: {}",
        ballast.iter().map(|&b| u64::from(b)).sum::<u64>() >> 20,
        recording.peak_rss_bytes
    );
    assert!(recording.peak_rss_bytes > 0);
}

/// Saved recordings open as runs (a journal cut short too): their lines,
/// phases, icicle and memory by kind; the list of recordings compares one
/// with the shown one, the difference of their peaks by line.
#[test]
fn saved_recordings_open_as_runs_and_two_compare_by_line() {
    let _lock = common::mlx_memory_lock();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("mlx-glue/test-venv/bin/python");
    let jobs = root.join("tests/record/jobs.py");
    let dir = tempfile::tempdir().expect("tempdir");
    let record = |mode: &str, trace: &std::path::Path| {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
            .args(["record", "--interval-ms", "10", "--trace"])
            .arg(trace)
            .arg("--")
            .arg(&python)
            .arg(&jobs)
            .arg(mode)
            // The thread job holds its memory until the journal shows a
            // probe sample of it (not for a fixed time).
            .args((mode == "thread").then_some(trace))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("weightscope runs");
        assert!(status.success(), "{mode} recorded");
    };
    let thread = dir.path().join("thread.jsonl");
    let phases = dir.path().join("phases.json");
    record("thread", &thread);
    record("phases", &phases);
    // What a recorder killed mid-job leaves: the journal without its end.
    let text = std::fs::read_to_string(&thread).expect("journal");
    let cut = dir.path().join("cut.jsonl");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"record\":\"end\""))
        .collect();
    std::fs::write(&cut, kept.join("\n") + "\n").expect("write");

    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    // Tall enough that the side column's recordings list is on screen
    // (clicks land where a widget is drawn).
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 2400.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), open_app(&demo));
    harness.run();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Num2);
    harness.run();
    for path in [&cut, &phases] {
        harness
            .state_mut()
            .execute(AppCommand::LoadTrace(path.clone()));
        crate::hooks(&mut harness).wait_for_trace();
        harness.run();
    }
    // The last opened is shown: its lines, phases, icicle.
    let (shown, _) = crate::hooks(&mut harness)
        .last_recording()
        .expect("a recording");
    assert_eq!(shown.lines[0].frame.function, "layers", "{:?}", shown.lines);
    harness.get_by_label_contains("By phase (between the job's marks)");
    harness.get_by_label_contains("Growth by stack (icicle)");
    harness.get_by_label("Recordings");
    assert!(
        harness
            .query_all_by_label_contains("cut short")
            .next()
            .is_some()
    );
    // Compare the first (the thread job, cut short) with the shown one.
    harness
        .get_all_by_label("compare")
        .next()
        .expect("a recording to compare")
        .click();
    harness.run();
    harness.get_by_label_contains("Peak of the compared");
    assert!(
        harness
            .query_all_by_label_contains(" in layers")
            .next()
            .is_some()
    );
    assert!(
        harness
            .query_all_by_label_contains(" in work")
            .next()
            .is_some(),
        "the worker thread's line, in the difference"
    );
    // Below the timeline: the memory by kind.
    harness.get_by_label("memory by kind").click();
    harness.run();
    harness.get_by_label_contains("Resident memory by kind");
    // Show the cut-short one: it is the run now, said cut short.
    harness.get_by_label("show").click();
    harness.run();
    let (shown, _) = crate::hooks(&mut harness)
        .last_recording()
        .expect("a recording");
    assert!(shown.cut_short);
    assert_eq!(shown.lines[0].frame.function, "work", "{:?}", shown.lines);
    harness.get_by_label_contains("cut short (the recorder stopped");
}

/// Records `held_jobs.py MODE` with a trace and opens the trace in the
/// window's profiler (the folder holds the trace and the demo checkpoint).
fn held_recording_in_the_window(
    mode: &str,
) -> (Harness<'static, WeightscopeApp>, tempfile::TempDir) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("held.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .args(["record", "--interval-ms", "20", "--trace"])
        .arg(&trace)
        .arg("--")
        .arg(root.join("mlx-glue/test-venv/bin/python"))
        .arg(root.join("tests/record/held_jobs.py"))
        .arg(mode)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("weightscope runs");
    assert!(status.success(), "recorded");
    let demo = demo::ensure_demo(&dir.path().join("demo")).expect("demo");
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1400.0, 2400.0))
        .build_ui_state(|ui, app: &mut WeightscopeApp| app.ui(ui), open_app(&demo));
    harness.run();
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(Tab::Profiler));
    harness.state_mut().execute(AppCommand::LoadTrace(trace));
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    (harness, dir)
}

/// Who held it, in the window: a recording whose job kept one array and 16
/// slices of it shows the Held by table with the root and the buffer
/// counted once; with another thread running, the slices' bytes counted
/// beyond MLX active (never as memory MLX held), and why.
#[test]
fn a_recording_shows_who_held_its_memory() {
    let _lock = common::mlx_memory_lock();
    let (harness, _dir) = held_recording_in_the_window("views");
    harness.get_by_label("Held by");
    harness.get_by_label("base");
    harness.get_by_label("by buffer");
    harness.get_by_label_contains("views of one buffer counted once (64.00 MiB shared)");
    assert!(harness.query_by_label("counted twice").is_none());
    let (harness, _dir) = held_recording_in_the_window("views-threaded");
    harness.get_by_label("base");
    harness.get_by_label("counted twice");
    harness.get_by_label("-64.00 MiB");
    // In the finding, and beside the row.
    assert_eq!(
        harness
            .query_all_by_label_contains("the job had other threads running")
            .count(),
        2
    );
}

/// A moment selected and an overlay made on one checkpoint's run stay
/// with it: opening another checkpoint shows its runs alone; an overlay
/// chosen names its run and checkpoint.
#[test]
fn a_selection_and_overlays_belong_to_the_run_they_were_made_on() {
    let _lock = common::mlx_memory_lock();
    let a = tempfile::tempdir().expect("tempdir");
    write_eight_shards(a.path());
    let b = tempfile::tempdir().expect("tempdir");
    let b_path = five_tensors(b.path());
    let mut harness = harness(open_app(a.path()));
    harness.get_by_label("Profiler").click();
    harness.run();
    harness.get_by_label("Run walk").click();
    harness.step();
    harness.step();
    finish_walk(&mut harness);
    crate::hooks(&mut harness).select_moment(1.0);
    harness.get_by_label("Overlay this run").click();
    harness.run();
    let names = crate::hooks(&mut harness).overlay_names();
    assert_eq!(names.len(), 1);
    let a_name = a
        .path()
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(names[0].ends_with(&format!("on {a_name}")), "{names:?}");
    assert!(names[0].starts_with("release-shard none"), "{names:?}");
    harness.get_by_label_contains(&format!("x {}", names[0]));
    // A second walk of the same checkpoint: the moment selected on the
    // first is gone, the overlay chosen stays.
    harness.get_by_label("Run walk").click();
    harness.step();
    assert_eq!(crate::hooks(&mut harness).selected_moment(), None);
    harness.step();
    finish_walk(&mut harness);
    assert_eq!(crate::hooks(&mut harness).overlay_names(), names);
    // Another checkpoint: no moment, no overlay of the old one.
    crate::hooks(&mut harness).select_moment(1.0);
    harness
        .state_mut()
        .execute(AppCommand::Open(b_path.clone()));
    while crate::hooks(&mut harness).opened_path() != Some(b_path.as_path()) {
        crate::hooks(&mut harness)
            .wait_for_worker()
            .expect("opened");
    }
    harness.run();
    assert_eq!(crate::hooks(&mut harness).selected_moment(), None);
    assert!(crate::hooks(&mut harness).overlay_names().is_empty());
}

/// The demo open, the Profiler shown, and the journals of four ranks
/// (`common::hosts::rank_journals`, in `dir`) picked in the file dialog and
/// merged.
fn four_ranks_merged(dir: &std::path::Path) -> Harness<'static, WeightscopeApp> {
    let journal = common::hosts::rank_journals(dir);
    let demo = demo::ensure_demo(&dir.join("demo")).expect("demo");
    let mut harness = harness(open_app(&demo));
    harness
        .state_mut()
        .execute(AppCommand::ShowTab(Tab::Profiler));
    harness.run();
    // As the file dialog answers when four files are picked.
    harness
        .state_mut()
        .picked_for(Dialog::OpenTrace, (0..4).map(&journal).collect());
    harness.step(); // frames go on while the thread reads and merges
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("merged 4 journals of one job: rank ");
    harness
}

/// The ranks not overlaid: the one shown as the run.
fn shown_ranks(harness: &mut Harness<'_, WeightscopeApp>) -> Vec<u32> {
    let overlays = crate::hooks(harness).overlay_names();
    assert_eq!(overlays.len(), 3, "{overlays:?}");
    (0..4)
        .filter(|r| {
            !overlays
                .iter()
                .any(|o| o.starts_with(&format!("rank {r} (")))
        })
        .collect()
}

/// The button (not the legend's check box of the same name) whose label
/// starts with `text`.
fn button_starting(harness: &Harness<'_, WeightscopeApp>, text: &str) {
    harness
        .get_by(|node| {
            node.role() == egui::accesskit::Role::Button
                && node.label().is_some_and(|l| l.starts_with(text))
        })
        .click();
}

#[test]
fn journals_of_four_hosts_open_merged_with_each_rank_overlaid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _lock = common::mlx_memory_lock();
    let mut harness = four_ranks_merged(dir.path());
    let demo = dir.path().join("demo");
    let report = crate::hooks(&mut harness).merged_report();
    assert!(
        report[0].starts_with("4 recordings aligned by their collectives"),
        "{report:?}"
    );
    // Rank 2 (its clock 7 s ahead) held the most, and its line is named.
    assert!(
        report
            .iter()
            .any(|l| l.starts_with("highest: rank 2 (") && l.contains("job.py:")),
        "{report:?}"
    );
    // The rank that peaked highest (2) is shown as the run; the other
    // ranks are overlays named by rank and host, on the merged clock (not
    // 7 s away).
    assert_eq!(shown_ranks(&mut harness), [2]);
    let overlays = crate::hooks(&mut harness).overlay_names();
    harness.get_by_label_contains("of one job: rank 2 (");
    for line in &report {
        harness.get_by_label(line);
    }
    // Below the timeline, chosen by itself: each rank a band, stacked,
    // the top the job's total (its caption is drawn only then).
    harness.get_by_label("ranks");
    harness.get_by_label_contains("Each rank's memory (");
    // Exported, every rank: byte for byte what `weightscope export` writes
    // from the same journals.
    let exported = dir.path().join("job.perfetto.json");
    trace_path(&mut harness, &exported);
    harness.get_by_label("Export to path").click();
    written(&mut harness);
    harness.get_by_label_contains("exported (perfetto, 4 journals merged) to");
    let ranks: Vec<_> = (0..4)
        .map(|r| dir.path().join(format!("rank{r}.jsonl")))
        .collect();
    let cli = cli_export(&ranks, "perfetto");
    assert_eq!(std::fs::read(&exported).expect("exported"), cli);
    // A pattern typed in the trace path field merges the same journals.
    let pattern = dir.path().join("rank*.jsonl");
    trace_path(&mut harness, &pattern);
    harness.get_by_label("Open from path").click();
    harness.step();
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("merged 4 journals of one job: rank 2 (");
    assert_eq!(crate::hooks(&mut harness).merged_report(), report);
    assert_eq!(crate::hooks(&mut harness).overlay_names(), overlays);
    let none = dir.path().join("nothing-*.jsonl");
    trace_path(&mut harness, &none);
    harness.get_by_label("Open from path").click();
    harness.run();
    harness.get_by_label_contains("nothing-*.jsonl: no file matches");
    // One journal that is not a recording: said, naming the file.
    let walk = dir.path().join("walk.json");
    let walked = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("walk")
        .arg(&demo)
        .args(["--policy", "release-shard", "--trace"])
        .arg(&walk)
        .output()
        .expect("walk runs");
    assert!(walked.status.success());
    harness.state_mut().picked_for(
        Dialog::OpenTrace,
        vec![dir.path().join("rank0.jsonl"), walk],
    );
    harness.step();
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("walk.json: not a recording");
    // The run shown is kept.
    assert_eq!(crate::hooks(&mut harness).overlay_names().len(), 3);
}

/// The merged view shows the rank that peaked highest whole; another is
/// picked in "Shown whole"; a rank's overlay removed by its chip (or all
/// by "Clear overlays") takes its band below with it.
#[test]
fn another_rank_of_merged_journals_is_shown_whole_and_chips_take_their_bands() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _lock = common::mlx_memory_lock();
    let mut harness = four_ranks_merged(dir.path());
    assert_eq!(shown_ranks(&mut harness), [2]);
    let report = crate::hooks(&mut harness).merged_report();
    // Another rank shown whole, picked in the merged view: the journals
    // merged again with it as the run, the report unchanged.
    harness.get_by_label("Shown whole").click();
    harness.run();
    // The list's entry (the host is this machine's name; the ranks plot's
    // legend has a check box of that name too).
    button_starting(&harness, "rank 0 (");
    harness.step();
    crate::hooks(&mut harness).wait_for_trace();
    harness.run();
    harness.get_by_label_contains("of one job: rank 0 (");
    assert_eq!(shown_ranks(&mut harness), [0]);
    assert_eq!(crate::hooks(&mut harness).merged_report(), report);
    assert_eq!(crate::hooks(&mut harness).merged_lane_names().len(), 4);
    // Rank 1's overlay removed by its chip: its band below goes too.
    button_starting(&harness, "x rank 1 (");
    harness.run();
    let banded = crate::hooks(&mut harness).merged_lane_names();
    assert_eq!(banded.len(), 3, "{banded:?}");
    assert!(
        !banded.iter().any(|l| l.starts_with("rank 1 (")),
        "{banded:?}"
    );
    // "Clear overlays": only the rank shown is left banded.
    harness.get_by_label("Clear overlays").click();
    harness.run();
    let banded = crate::hooks(&mut harness).merged_lane_names();
    assert_eq!(banded.len(), 1, "{banded:?}");
    assert!(banded[0].starts_with("rank 0 ("), "{banded:?}");
}

/// "Export to path" writes what "Save trace" saves, in the format chosen,
/// byte for byte as `weightscope export` writes the saved trace; a file
/// already there is kept.
#[test]
fn the_window_exports_a_walk_as_the_cli_does() {
    let _lock = common::mlx_memory_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    write_eight_shards(dir.path());
    let mut harness = harness(open_app(dir.path()));
    harness.get_by_label("Profiler").click();
    harness.run();
    harness.get_by_label("Run walk").click();
    harness.step();
    finish_walk(&mut harness);
    harness.run();
    let out = tempfile::tempdir().expect("out");
    let saved = out.path().join("walk.json");
    harness.get_by_label("Trace path").focus();
    harness.run();
    harness
        .get_by_label("Trace path")
        .type_text(&saved.display().to_string());
    harness.run();
    harness.get_by_label("Save to path").click();
    written(&mut harness);
    harness.get_by_label_contains("trace saved to");
    for (format, file) in [
        ("speedscope", "walk.speedscope.json"),
        ("folded", "walk.folded"),
    ] {
        let exported = out.path().join(file);
        trace_path(&mut harness, &exported);
        harness.get_by_label("Export as").click();
        harness.run();
        harness.get_by_label(format).click();
        harness.run();
        harness.get_by_label("Export to path").click();
        written(&mut harness);
        harness.get_by_label_contains(&format!("exported ({format}) to"));
        let cli_text = String::from_utf8(cli_export(&[&saved], format)).expect("utf-8");
        let window_text = std::fs::read_to_string(&exported).expect("exported");
        assert_eq!(window_text, cli_text, "{format}");
        // Again: the file is there and is kept.
        harness.get_by_label("Export to path").click();
        harness.run();
        harness.get_by_label_contains("exists: nothing exported");
        assert_eq!(std::fs::read_to_string(&exported).expect("kept"), cli_text);
    }
    // "Export…": the file dialog's answer (it asked about replacing) is
    // written over the file there.
    let exported = out.path().join("walk.folded");
    std::fs::write(&exported, "old").expect("old");
    harness.state_mut().picked_for(
        Dialog::ExportTrace(Format::Perfetto),
        vec![exported.clone()],
    );
    written(&mut harness);
    harness.get_by_label_contains("exported (perfetto) to");
    let text = std::fs::read_to_string(&exported).expect("exported");
    assert!(text.starts_with("{\"displayTimeUnit\""), "{text}");
}

/// What `weightscope export PATHS --format FORMAT` writes on stdout (it
/// must succeed).
fn cli_export(paths: &[impl AsRef<std::ffi::OsStr>], format: &str) -> Vec<u8> {
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_weightscope"))
        .arg("export")
        .args(paths)
        .args(["--format", format])
        .output()
        .expect("export");
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    cli.stdout
}
