//! The `weightscope` command: the window, or a subcommand for scripts.

use std::os::fd::AsFd;

use weightscope::app::shell;
use weightscope::checkpoint::{Checkpoint, TensorRef};
use weightscope::cli::{self, Command, inspect};
use weightscope::mlx;
use weightscope::units::printable;
use weightscope::weights::{MlxNative, PreviewOptions, Weights, demo};

/// Exit status for bad input or usage (the CLI contract).
const BAD_INPUT: u8 = 2;

fn main() {
    let code = run();
    // A recorder thread still waiting for its job (the window closed while
    // recording) never drops its probe: its folder goes now.
    weightscope::profile::record::probe::remove_installed();
    // Skips C++ static destructors: MLX's CUDA backend destroys its handles
    // after the driver has shut down and aborts the process (seen on an H200
    // with MLX 0.32.2). Everything we own was dropped and flushed by now.
    mlx::exit_now(code)
}

/// One line on stderr, with names and messages from files made printable.
fn say(message: std::fmt::Arguments<'_>) {
    eprintln!("weightscope: {}", printable(&message.to_string()));
}

fn run() -> u8 {
    let launched = std::time::Instant::now();
    let command = match cli::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(err) => {
            // Help and version on stdout, mistakes on stderr, as clap decides.
            let _ = err.print();
            return cli::exit_code(&err);
        }
    };
    // On a GPU with managed memory, MLX must be capped before anything is
    // materialized: the variable applies to every command and the window.
    if let Some(limit) = std::env::var_os("WEIGHTSCOPE_MEMORY_LIMIT") {
        let text = limit.to_string_lossy();
        let set = weightscope::units::parse_size(&text)
            .filter(|b| *b > 0)
            .ok_or_else(|| format!("WEIGHTSCOPE_MEMORY_LIMIT=`{text}` is not a size such as 8G"))
            .and_then(|bytes| mlx::set_memory_limit(bytes).map_err(|e| e.to_string()));
        if let Err(err) = set {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    }
    // MLX's buffer cache (32 MB by default on the CPU backend): freed
    // buffers it keeps for reuse instead of returning them.
    if let Some(limit) = std::env::var_os("WEIGHTSCOPE_CACHE_LIMIT") {
        let text = limit.to_string_lossy();
        let set = weightscope::units::parse_size(&text)
            .ok_or_else(|| format!("WEIGHTSCOPE_CACHE_LIMIT=`{text}` is not a size such as 1G"))
            .and_then(|bytes| mlx::set_cache_limit(bytes).map_err(|e| e.to_string()));
        if let Err(err) = set {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    }
    match command {
        Command::Completions(shell) => match cli::completions(shell, &mut std::io::stdout()) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {}
            Err(err) => {
                say(format_args!("cannot write the completions: {err}"));
                return 1;
            }
        },
        Command::Device => return print_device(),
        Command::Inspect { path, json } => return inspect(&path, json),
        Command::Tensor {
            path,
            name,
            json,
            repeat,
            cells,
        } => return tensor(&path, &name, json.then_some(cells), repeat),
        Command::Walk(args) => return walk(&args),
        Command::Diff(args) => return diff(&args),
        Command::Check(args) => return check(&args),
        Command::Record(args) => return record(&args),
        Command::Window { path } => {
            let path = match path {
                Some(path) => path,
                None => match demo::ensure_demo(&demo::demo_dir()) {
                    Ok(dir) => dir,
                    Err(err) => {
                        say(format_args!("{err}"));
                        return 1;
                    }
                },
            };
            let device = mlx::default_device().map_err(|e| e.to_string());
            if let Err(err) = shell::run(Some(path), device, launched) {
                say(format_args!("{err:#}"));
                return 1;
            }
        }
    }
    0
}

fn inspect(path: &std::path::Path, json: bool) -> u8 {
    let checkpoint = match Checkpoint::open(path) {
        Ok(checkpoint) => checkpoint,
        Err(err) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    };
    let fatal = checkpoint.fatal_problems();
    if !fatal.is_empty() {
        for problem in fatal {
            say(format_args!("{problem}"));
        }
        return BAD_INPUT;
    }
    for problem in checkpoint.problems() {
        say(format_args!("warning: {problem}"));
    }
    let summary = checkpoint.summary();
    let stdout = std::io::stdout();
    // Rust's stdout handle is line-buffered and searches every write for a
    // newline (15 M instructions over the 14 MB tensor list of a 90k-tensor
    // checkpoint); a duplicate of its descriptor is written to as a file.
    widen_pipe(&stdout);
    let raw: Box<dyn std::io::Write> = match stdout.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(stdout.lock()),
    };
    // Small: the JSON tensor list comes in pieces of about 300 KB, which a
    // smaller buffer passes straight through instead of copying.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, raw);
    let written = if json {
        inspect::write_json(&checkpoint, &summary, &mut out)
    } else {
        inspect::write_text(&checkpoint, &summary, &mut out)
    };
    let flushed = written.and_then(|()| std::io::Write::flush(&mut out));
    // The process ends here: freeing 90k names one by one would only add
    // time the OS spends better reclaiming the pages at once.
    std::mem::forget(summary);
    std::mem::forget(checkpoint);
    match flushed {
        Ok(()) => 0,
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(err) => {
            say(format_args!("cannot write the output: {err}"));
            1
        }
    }
}

/// When stdout is a pipe, asks for a 1 MiB buffer (Linux's default is 64
/// KiB): the 14 MB list of a 90k-tensor checkpoint then passes in a few
/// hundred wake-ups of the reader instead of thousands. Where it cannot
/// grow (a pipe limit, not a pipe at all), nothing changes.
fn widen_pipe(stdout: &std::io::Stdout) {
    use std::os::fd::AsRawFd as _;
    let fd = stdout.as_fd().as_raw_fd();
    #[allow(unsafe_code)]
    // SAFETY: fcntl on a descriptor this process owns, with an integer
    // argument; it fails harmlessly (EBADF, EINVAL, EPERM) where it does
    // not apply.
    let _ = unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, 1 << 20) };
}

/// `json`: `Some(with the heatmap's cells)` for JSON, `None` for text.
fn tensor(path: &std::path::Path, name: &str, json: Option<bool>, repeat: u32) -> u8 {
    let checkpoint = match Checkpoint::open(path) {
        Ok(checkpoint) => checkpoint,
        Err(err) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    };
    // A bad shard elsewhere does not stop reading a tensor from a good one.
    if checkpoint.tensor(name).is_none() {
        let problems = checkpoint.fatal_problems();
        if let Some(problem) = problems.first() {
            say(format_args!("{problem}"));
        } else {
            let names = checkpoint.tensors().iter().map(TensorRef::name);
            match cli::closest(name, names) {
                Some(close) => say(format_args!(
                    "no tensor named `{name}` (did you mean `{close}`?): {}",
                    path.display()
                )),
                None => say(format_args!("no tensor named `{name}`: {}", path.display())),
            }
        }
        return BAD_INPUT;
    }
    let mut weights = match Weights::open_with(checkpoint, MlxNative) {
        Ok(weights) => weights,
        Err(err) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    };
    // Repeated summaries (benchmarks) amortize compiling our CUDA histogram
    // kernel; a one-shot command does not.
    mlx::use_summary_kernel(repeat > 1);
    let mut best: Option<weightscope::weights::TensorPreview> = None;
    let mut runs = Vec::new();
    for _ in 0..repeat {
        match weights.preview(name, &PreviewOptions::default()) {
            Ok(preview) => {
                runs.push(preview.summary_millis);
                if best
                    .as_ref()
                    .is_none_or(|b| preview.summary_millis < b.summary_millis)
                {
                    // The first run's materialization is the one that read the bytes.
                    let materialize_millis = best
                        .as_ref()
                        .map_or(preview.materialize_millis, |b| b.materialize_millis);
                    best = Some(weightscope::weights::TensorPreview {
                        materialize_millis,
                        ..preview
                    });
                }
            }
            Err(err) => {
                say(format_args!("tensor `{name}`: {err}"));
                return 1;
            }
        }
    }
    let Some(preview) = best else {
        return 1;
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = if let Some(cells) = json {
        cli::tensor::write_json(&preview, &runs, cells, &mut out)
    } else {
        cli::tensor::write_text(&preview, &mut out)
    };
    match written {
        Ok(()) => 0,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(err) => {
            say(format_args!("cannot write the output: {err}"));
            1
        }
    }
}

/// Runs and records the job; exits with its status.
fn record(args: &cli::record::RecordArgs) -> u8 {
    if let Err(err) = cli::record::check_outputs(args) {
        say(format_args!("{err}"));
        return BAD_INPUT;
    }
    let control = weightscope::profile::record::RecordControl::new();
    // Ctrl+C, SIGTERM, SIGHUP to weightscope: passed on to the job's
    // process group (when the job has the terminal, Ctrl+C goes there by
    // itself); the recording goes on until the job exits (a bounded time),
    // then what was seen is written. Attached, the recording just ends.
    let forward = control.clone();
    if let Err(err) = cli::signals::watch(false, move |signal| forward.forward(signal)) {
        say(format_args!("cannot catch termination signals: {err}"));
    }
    let recording = match cli::record::run(args, &control) {
        Ok(recording) => recording,
        Err(err) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    };
    let _ = cli::record::write_summary(&recording, &mut std::io::stderr().lock());
    let saved = cli::record::save(&recording, args);
    if let Err(err) = &saved {
        say(format_args!("{err}"));
    }
    if let Some(signal) = cli::signals::received() {
        say(format_args!(
            "the recording was cut short by {} (passed on to the job); what was seen is written",
            cli::signals::name(signal)
        ));
        return cli::signals::exit_status(signal);
    }
    if saved.is_err() {
        return 1;
    }
    recording
        .exit
        .map_or(0, |exit| u8::try_from(exit.status() & 0xff).unwrap_or(1))
}

fn walk(args: &cli::WalkArgs) -> u8 {
    if let Err(err) = cli::walk::check_outputs(args) {
        say(format_args!("{err}"));
        return BAD_INPUT;
    }
    // SIGINT, SIGTERM, SIGHUP: the walk stops after the tensor at hand and
    // what it recorded is written and printed.
    if let Err(err) = cli::signals::watch(true, |_| {}) {
        say(format_args!("cannot catch termination signals: {err}"));
    }
    let report = match cli::walk::run(args, &cli::signals::CUT_SHORT) {
        Ok(report) => report,
        Err(cli::walk::WalkError::BadInput(err)) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
        Err(cli::walk::WalkError::Failed(err)) => {
            say(format_args!("{err}"));
            return 1;
        }
    };
    // The report is printed even when a trace file could not be written.
    let saved = report.save(args);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = if args.json {
        serde_json::to_writer(&mut out, &report.to_json())
            .map_err(std::io::Error::from)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
    } else {
        report.write_text(&mut out)
    };
    drop(out);
    if let Err(errors) = &saved {
        for err in errors {
            say(format_args!("{err}"));
        }
    }
    if let Some(signal) = cli::signals::received() {
        say(format_args!(
            "the walk was cut short by {} after {} of {} tensors; what it recorded is above{}",
            cli::signals::name(signal),
            report.outcome.steps_done,
            report.outcome.steps_total,
            if args.csv.is_some() || args.trace.is_some() {
                " and in the trace"
            } else {
                ""
            }
        ));
        return cli::signals::exit_status(signal);
    }
    if let Err(code) = output_status(written) {
        return code;
    }
    if saved.is_err() {
        return 1;
    }
    if let Some(error) = &report.outcome.error {
        say(format_args!("the walk stopped: {error}"));
        return 1;
    }
    0
}

/// What a failed write of a report means for the exit status: a closed
/// pipe (`| head`, `| true`) is the reader's choice and not a failure;
/// anything else is said and gives 1.
fn output_status(written: std::io::Result<()>) -> Result<(), u8> {
    match written {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => {
            say(format_args!("cannot write the output: {err}"));
            Err(1)
        }
    }
}

fn diff(args: &cli::DiffArgs) -> u8 {
    // SIGINT, SIGTERM, SIGHUP: the diff stops after the tensor at hand and
    // prints what it compared, marked as cut short.
    if let Err(err) = cli::signals::watch(true, |_| {}) {
        say(format_args!("cannot catch termination signals: {err}"));
    }
    let report = match cli::diff::run(args, &cli::signals::CUT_SHORT) {
        Ok(report) => report,
        Err(err) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = if args.json {
        serde_json::to_writer(&mut out, &cli::diff::to_json(args, &report))
            .map_err(std::io::Error::from)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
    } else {
        cli::diff::write_text(args, &report, &mut out)
    };
    drop(out);
    if let Some(signal) = cli::signals::received() {
        say(format_args!(
            "the diff was cut short by {}; the report above covers the tensors compared before it",
            cli::signals::name(signal)
        ));
        return cli::signals::exit_status(signal);
    }
    match output_status(written) {
        Ok(()) => 0,
        Err(code) => code,
    }
}

fn print_device() -> u8 {
    let report = mlx::default_device().and_then(|device| Ok((device, mlx::memory()?)));
    match report {
        Ok((device, memory)) => {
            println!("{}", device.describe());
            println!("device: {}", device.name());
            println!("gpu_available: {}", device.gpu_available);
            println!("mlx_active_bytes: {}", memory.active_bytes);
            println!("mlx_cache_bytes: {}", memory.cache_bytes);
            println!("mlx_peak_bytes: {}", memory.peak_bytes);
            println!("mlx_memory_limit_bytes: {}", memory.limit_bytes);
            0
        }
        Err(err) => {
            say(format_args!("{err}"));
            1
        }
    }
}

fn check(args: &cli::CheckArgs) -> u8 {
    use std::io::Write as _;
    let report = match cli::check::run(args) {
        Ok(report) => report,
        Err(err) => {
            say(format_args!("{err}"));
            return BAD_INPUT;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        cli::check::write_text(&report, &mut out)
    };
    if let Err(code) = output_status(written.and_then(|()| out.flush())) {
        return code;
    }
    report.exit_status()
}
