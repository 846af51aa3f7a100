//! Command-line parsing and output formats.

pub mod check;
pub mod convert;
pub mod diff;
pub mod export;
pub mod gguf;
pub mod inspect;
pub mod pieces;
pub mod record;
pub mod report;
pub mod signals;
pub mod tensor;
pub mod walk;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser, Subcommand};

use crate::memory::Policy;
use crate::profile::Transform;
use crate::weights::{BUILTIN_VIEWS, ViewChoice};
pub use check::CheckArgs;
pub use diff::DiffArgs;
pub use inspect::InspectArgs;
pub use record::RecordArgs;
pub use report::ReportArgs;
pub use tensor::TensorArgs;
pub use walk::WalkArgs;

/// What the command line asked for: the window, or a subcommand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// Open the window on a checkpoint (`None`: the bundled demo).
    Window(Option<PathBuf>),
    /// Run a subcommand.
    Run(Command),
}

/// weightscope: checkpoint browser, doctor and memory profiler for MLX.
///
/// With no subcommand it opens the window on PATH (a folder of sharded
/// safetensors, one `.safetensors` or `.gguf` file, a Hub repo
/// `hf://ORG/REPO[@REV]` or an `https://` address), or on the bundled demo.
#[derive(Debug, Parser)]
#[command(
    name = "weightscope",
    version,
    args_conflicts_with_subcommands = true,
    after_help = "Exit status: 0 on success, 1 when a job fails or `check` finds errors, 2 on bad input.\nDocs: README.md and docs/ in the repository."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// A folder, one `.safetensors` or `.gguf` file, `hf://ORG/REPO[@REV]` or an `https://` address to open in the window (none: the bundled demo).
    path: Option<PathBuf>,
}

/// A subcommand, with its arguments as clap parses them (each subcommand's
/// `Args` lives beside its `main` in `src/cli/<name>.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// The header summary: shards, tensors, totals, parameters, quantization (reads no tensor bytes).
    Inspect(InspectArgs),
    /// Materialize one tensor through MLX: statistics, histogram, first values (decoded and dequantized).
    Tensor(TensorArgs),
    /// Materialize every tensor in shard order under a release policy and record memory.
    Walk(WalkArgs),
    /// How far B moved from A: every tensor compared on MLX, decoded to f32 whatever its dtype or quantization.
    Diff(DiffArgs),
    /// What is wrong with a checkpoint that opens (exit 1 when errors are found).
    Check(CheckArgs),
    /// PyTorch .bin/.pth files to safetensors, sharded as the source, without running their pickle.
    Convert(convert::ConvertArgs),
    /// Run CMD and record its memory until it exits: RSS of its process tree, the shard files it holds open, MLX's counters from inside Python jobs; findings at the end.
    #[command(
        after_help = "Examples:\n  weightscope record --json job.json -- python -m mlx_lm convert --hf-path ./model -q\n  weightscope record --pid 4242\nThe exit status is the job's (128+N when signal N ended it); 2 when it cannot start.\nDocs: docs/record.md."
    )]
    Record(RecordArgs),
    /// The summary of a saved recording (`record --trace`; a journal cut short included): the figures `record` printed.
    Report(ReportArgs),
    /// A recording, a walk, or one job's rank journals in a viewer's format: Perfetto, speedscope, folded stacks.
    Export(export::ExportArgs),
    /// MLX's default device, whether a GPU is available, its memory counters.
    Device {
        /// One JSON object (byte counts) instead of text (human units).
        #[arg(long)]
        json: bool,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn policy_parser() -> impl clap::builder::TypedValueParser<Value = Policy> {
    let names: Vec<&'static str> = Policy::ALL.iter().map(|p| p.as_str()).collect();
    clap::builder::PossibleValuesParser::new(names)
        .try_map(|name| Policy::parse(&name).ok_or("not a policy"))
}

fn transform_parser() -> impl clap::builder::TypedValueParser<Value = Transform> {
    clap::builder::PossibleValuesParser::new(["none", "f16", "q4"])
        .try_map(|name| Transform::parse(&name).ok_or("not a transform"))
}

fn size(text: &str) -> Result<u64, ArgError> {
    crate::units::parse_size(text).ok_or_else(|| ArgError::NotASize(text.to_owned()))
}

fn positive_size(text: &str) -> Result<u64, ArgError> {
    size(text).and_then(|bytes| {
        if bytes > 0 {
            Ok(bytes)
        } else {
            Err(ArgError::Zero)
        }
    })
}

/// A view: `auto`, `identity`, a built-in name, or a view file that exists.
/// A mistyped name is an error that lists the built-ins, never a path.
fn view(text: &str) -> Result<ViewChoice, ArgError> {
    let choice = ViewChoice::parse(text);
    match &choice {
        // Something that is there but is not a regular file (a FIFO, a
        // folder) is said as what it is, never "does not exist".
        ViewChoice::File(path) if std::fs::symlink_metadata(path).is_ok() && !path.is_file() => {
            let kind = std::fs::metadata(path)
                .ok()
                .and_then(|m| crate::files::irregular_kind(m.file_type()))
                .unwrap_or("not a file");
            Err(ArgError::View(format!(
                "the view file `{text}` is {kind}, not a regular file"
            )))
        }
        ViewChoice::File(path) if !path.is_file() => {
            let close = closest(
                text,
                BUILTIN_VIEWS.iter().copied().chain(["auto", "identity"]),
            );
            Err(ArgError::View(format!(
                "`{text}` is neither a view ({}) nor a view file that exists{}",
                ["auto", "identity"]
                    .iter()
                    .chain(BUILTIN_VIEWS.iter())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", "),
                close.map_or(String::new(), |c| format!("; did you mean `{c}`?"))
            )))
        }
        _ => Ok(choice),
    }
}

/// The candidate most like `text`, when one is close (for "did you mean").
#[must_use]
pub fn closest<'a>(text: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(text, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Names of the subcommands, as clap has them (for "did you mean" on a
/// mistyped one).
fn subcommands() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect()
}

/// The usage error for a first argument that is neither a subcommand nor
/// an existing path, with the closest subcommand as a tip.
fn not_a_subcommand(text: &str) -> clap::Error {
    let names = subcommands();
    let hint = closest(text, names.iter().map(String::as_str)).map_or_else(String::new, |c| {
        format!("\n\n  tip: a similar subcommand exists: '{c}'")
    });
    Cli::command().error(
        ErrorKind::InvalidSubcommand,
        format!("`{text}` is neither a subcommand nor a file or folder that exists{hint}"),
    )
}

/// Parses the arguments after the program name.
///
/// # Errors
/// A clap error to print as is: `--help` and `--version` (exit 0, see
/// [`exit_code`]), and every usage mistake (exit 2), with suggestions for
/// typos. A first argument that is neither a subcommand nor an existing path
/// is a mistake, never a window.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, clap::Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    // `inspct ~/models/x`: a mistyped subcommand followed by its arguments
    // would reach clap as the window's PATH and a stray subcommand.
    if let [first, _, ..] = args.as_slice() {
        let text = first.to_string_lossy();
        if !text.starts_with('-')
            && text != "help"
            && !subcommands().iter().any(|name| *name == text)
            && !names_a_checkpoint(std::path::Path::new(first))
        {
            return Err(not_a_subcommand(&text));
        }
    }
    let with_program = std::iter::once(OsString::from("weightscope")).chain(args);
    let cli = Cli::try_parse_from(with_program)?;
    Ok(match (cli.command, cli.path) {
        (Some(command), _) => Invocation::Run(command),
        (None, None) => Invocation::Window(None),
        (None, Some(path)) if names_a_checkpoint(&path) => Invocation::Window(Some(path)),
        (None, Some(path)) => return Err(not_a_subcommand(&path.to_string_lossy())),
    })
}

/// Whether `path` exists here or is a remote address (`hf://`, `http(s)://`).
/// Opens the checkpoint a command names, on this machine or at an address
/// (a Hub repo or a URL, through the remote layer); an address takes
/// seconds, so its progress goes to stderr when that is a terminal.
///
/// # Errors
/// As [`crate::remote::open_checkpoint`].
pub fn open_checkpoint(
    path: &std::path::Path,
) -> Result<crate::checkpoint::Checkpoint, crate::checkpoint::CheckpointError> {
    use std::io::IsTerminal as _;
    let remote = path.to_str().is_some_and(crate::remote::is_address);
    if remote && std::io::stderr().is_terminal() {
        let shown = crate::units::location_data(&path.display().to_string());
        return crate::remote::open_checkpoint(path, &move |parsed, total| {
            let end = if parsed == total { "\n" } else { "" };
            eprint!("\r{shown}: headers {parsed}/{total}{end}");
        });
    }
    crate::remote::open_checkpoint(path, &|_, _| {})
}

fn names_a_checkpoint(path: &std::path::Path) -> bool {
    path.exists() || path.to_str().is_some_and(crate::remote::is_address)
}

/// Prints a parse error as clap words it: help and version as clap writes
/// them (styled on a terminal), a mistake on stderr as shown text (it
/// quotes what was typed, which may hold an escape sequence: clap strips
/// those only when stderr is not a terminal).
pub fn print_parse_error(err: &clap::Error) {
    if !err.use_stderr() {
        let _ = err.print();
        return;
    }
    let text = err.render().to_string();
    let mut shown = crate::units::ShownLines::new(std::io::stderr().lock());
    let _ = std::io::Write::write_all(&mut shown, text.as_bytes())
        .and_then(|()| shown.finish().map(drop));
}

/// The exit status for a parse error: 0 for `--help` and `--version`, 2 for
/// mistakes (the CLI contract's bad-input status).
#[must_use]
pub fn exit_code(err: &clap::Error) -> u8 {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
        _ => 2,
    }
}

/// Writes the completion script for `shell`.
///
/// # Errors
/// When `out` fails.
pub fn completions(
    shell: clap_complete::Shell,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    // Generated whole first: clap_complete panics on a failed write.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "weightscope", &mut script);
    out.write_all(&script)
}

/// `device --json`.
#[derive(serde::Serialize)]
struct JsonDevice {
    description: String,
    device: String,
    gpu_available: bool,
    mlx_active_bytes: u64,
    mlx_cache_bytes: u64,
    mlx_peak_bytes: u64,
    mlx_memory_limit_bytes: u64,
}

/// `weightscope device`: runs it and returns the exit status.
fn device(json: bool) -> u8 {
    let report =
        crate::mlx::default_device().and_then(|device| Ok((device, crate::mlx::memory()?)));
    match report {
        Ok((device, memory)) => {
            let text = if json {
                let doc = JsonDevice {
                    description: device.describe(),
                    device: device.name(),
                    gpu_available: device.gpu_available,
                    mlx_active_bytes: memory.active_bytes,
                    mlx_cache_bytes: memory.cache_bytes,
                    mlx_peak_bytes: memory.peak_bytes,
                    mlx_memory_limit_bytes: memory.limit_bytes,
                };
                format!(
                    "{}\n",
                    crate::units::json_shown(
                        serde_json::to_string_pretty(&doc).unwrap_or_default()
                    )
                )
            } else {
                format!(
                    "{}\ndevice          {}\ngpu available   {}\nMLX active      {}\nMLX cache       {}\n\
                     MLX peak        {}\nMLX limit       {}\n",
                    device.describe(),
                    device.name(),
                    if device.gpu_available { "yes" } else { "no" },
                    crate::units::human_bytes(memory.active_bytes),
                    crate::units::human_bytes(memory.cache_bytes),
                    crate::units::human_bytes(memory.peak_bytes),
                    crate::units::human_bytes(memory.limit_bytes)
                )
            };
            let written = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
            output_status(written).map_or_else(|code| code, |()| 0)
        }
        Err(err) => {
            stderr_line(format_args!("{err}"));
            1
        }
    }
}

/// Standard output for a report of megabytes. Rust's stdout handle is
/// line-buffered and searches every write for a newline (15 M instructions
/// over the 14 MB tensor list of a 90k-tensor checkpoint); a duplicate of
/// its descriptor is written to as a file instead. Its buffer is small:
/// tensor lists come in pieces of 150-300 KB, which it passes straight
/// through instead of copying.
fn big_output() -> std::io::BufWriter<Box<dyn std::io::Write>> {
    let stdout = std::io::stdout();
    widen_pipe(&stdout);
    let raw: Box<dyn std::io::Write> = match std::os::fd::AsFd::as_fd(&stdout).try_clone_to_owned()
    {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(stdout),
    };
    std::io::BufWriter::with_capacity(64 << 10, raw)
}

/// When stdout is a pipe, asks for a 1 MiB buffer (Linux's default is 64
/// KiB): the 14 MB list of a 90k-tensor checkpoint then passes in a few
/// hundred wake-ups of the reader instead of thousands. Where it cannot
/// grow (a pipe limit, not a pipe at all), nothing changes.
fn widen_pipe(stdout: &std::io::Stdout) {
    // Fails harmlessly (EBADF, EINVAL, EPERM) where it does not apply.
    let _ = rustix::pipe::fcntl_setpipe_size(stdout, 1 << 20);
}

/// Prints a command's report to standard output: `json` as one line when
/// given, else what `text` writes, each line escaped through
/// [`crate::units::ShownLines`].
fn print_report<T: serde::Serialize>(
    json: Option<&T>,
    text: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Some(value) = json {
        json_line(&mut out, value)
    } else {
        let mut shown = crate::units::ShownLines::new(&mut out);
        text(&mut shown).and_then(|()| shown.finish().map(drop))
    }
}

/// Writes `value` as one line of JSON, every character that is not shown
/// as itself written as a `\u` escape ([`crate::units::ShownJson`]).
///
/// # Errors
/// The writer's.
pub fn json_line<T: serde::Serialize + ?Sized>(
    out: &mut dyn std::io::Write,
    value: &T,
) -> std::io::Result<()> {
    let mut shown = crate::units::ShownJson::new(out);
    serde_json::to_writer(&mut shown, value).map_err(std::io::Error::from)?;
    std::io::Write::write_all(&mut shown, b"\n")?;
    shown.finish().map(drop)
}

/// What a failed write of a report means for the exit status, the same for
/// every subcommand: a closed pipe (`| head`, `| true`) is the reader's
/// choice and not a failure; anything else (a full disk) is said and gives 1.
fn output_status(written: std::io::Result<()>) -> Result<(), u8> {
    match written {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(err) => {
            stderr_line(format_args!("cannot write the output: {err}"));
            Err(1)
        }
    }
}

/// Why a subcommand could not do its work, said in one line on stderr.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The checkpoint cannot be opened, or a shard of it is bad.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// The Weights core refused (a view, MLX's loader).
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
    /// A file could not be written.
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    /// A trace could not be written.
    #[error(transparent)]
    Trace(#[from] crate::profile::TraceError),
    /// More than one output failed (each is written or not on its own).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<CliError>),
    /// A file read by its own format's reader (GGUF) is bad: one line
    /// naming it.
    #[error("{0}")]
    Message(String),
}

/// Why a command-line value was refused (clap prints it after the option).
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// Not a size such as 8G or 512M.
    #[error("`{0}` is not a size such as 8G, 512M, 64K or a number of bytes")]
    NotASize(String),
    /// A size that must be above zero.
    #[error("the limit must be more than 0")]
    Zero,
    /// Not a number of milliseconds in range.
    #[error("`{0}` is not a whole number of milliseconds from 1 to 60000")]
    NotAnInterval(String),
    /// A view name that is neither built in nor a file.
    #[error("{0}")]
    View(String),
}

/// Exit status for bad input or usage (the CLI contract).
pub const BAD_INPUT: u8 = 2;

pub use crate::units::stderr_line;

/// A warning line on stderr for each global a torch pickle imports that
/// the reader does not vouch for, with what became of it (`fate`).
pub fn warn_of_imports(
    checkpoint: &crate::checkpoint::Checkpoint,
    fate: &str,
    path: &std::path::Path,
) {
    if let Some((_, flagged)) = checkpoint.torch_verdict() {
        for g in flagged {
            stderr_line(format_args!(
                "warning: the pickle imports `{}` ({}): {fate}: {}",
                crate::units::Shown::new(&g.global),
                g.safety.name(),
                crate::units::Shown::path(path)
            ));
        }
    }
}

/// `result`'s value; or nothing, its error said on stderr in one line (the
/// caller then exits with [`BAD_INPUT`]).
pub fn ok_or_said<T>(result: Result<T, impl std::fmt::Display>) -> Option<T> {
    result
        .map_err(|err| stderr_line(format_args!("{err}")))
        .ok()
}

/// Ends the process with `code`: a probe folder a recorder thread still
/// holds (the window closed while recording) is removed first, then the
/// process exits without C++ static destructors (MLX's CUDA backend
/// destroys its handles after the driver has shut down and aborts:
/// docs/gpu.md). Everything we own was dropped and flushed.
pub fn exit(code: u8) -> ! {
    crate::profile::capture::probe::remove_installed();
    crate::mlx::exit_now(code)
}

/// What the process sets up before anything else runs: MLX's compiled
/// kernels kept in a folder of this user's alone (see
/// [`crate::mlx::keep_kernel_cache_private`]).
///
/// # Safety
/// Sets an environment variable: call it first thing in `main`, before
/// the process has any other thread.
#[allow(unsafe_code)]
pub unsafe fn prepare_process() {
    // Before this process opens anything: what it inherited is the user's,
    // for a recorded job.
    crate::profile::capture::remember_inherited_descriptors();
    // SAFETY: passed on from the caller.
    unsafe { crate::mlx::keep_kernel_cache_private() };
}

/// Sets MLX's memory and cache limits from `WEIGHTSCOPE_MEMORY_LIMIT` and
/// `WEIGHTSCOPE_CACHE_LIMIT`, before anything is materialized (on a GPU
/// with managed memory, MLX must be capped first): for every command and
/// the window.
///
/// # Errors
/// The exit status after saying which value is not a size.
pub fn apply_env_limits() -> Result<(), u8> {
    // The environment, read once here at the edge: a value that cannot be
    // used is one line naming its variable, before any work.
    let environment = match crate::environment::read() {
        Ok(environment) => environment,
        Err(err) => {
            stderr_line(format_args!("{err}"));
            return Err(BAD_INPUT);
        }
    };
    let (memory, cache) = (environment.memory_limit, environment.cache_limit);
    crate::environment::install(environment);
    if let Some(bytes) = memory
        && let Err(err) = crate::mlx::set_memory_limit(bytes)
    {
        stderr_line(format_args!("WEIGHTSCOPE_MEMORY_LIMIT: {err}"));
        return Err(BAD_INPUT);
    }
    // MLX's buffer cache (32 MB by default on the CPU backend): freed
    // buffers it keeps for reuse instead of returning them.
    if let Some(bytes) = cache
        && let Err(err) = crate::mlx::set_cache_limit(bytes)
    {
        stderr_line(format_args!("WEIGHTSCOPE_CACHE_LIMIT: {err}"));
        return Err(BAD_INPUT);
    }
    Ok(())
}

/// Runs a subcommand and returns its exit status.
#[must_use]
pub fn run(command: Command) -> u8 {
    match command {
        Command::Completions { shell } => output_status(completions(shell, &mut std::io::stdout()))
            .map_or_else(|code| code, |()| 0),
        Command::Device { json } => device(json),
        Command::Inspect(args) => inspect::main(&args),
        Command::Tensor(args) => tensor::main(&args),
        Command::Walk(args) => walk::main(&args),
        Command::Diff(args) => diff::main(&args),
        Command::Check(args) => check::main(&args),
        Command::Convert(args) => convert::main(&args),
        Command::Record(args) => record::main(&args),
        Command::Report(args) => report::main(&args),
        Command::Export(args) => export::main(&args),
    }
}

/// Parses milliseconds between samples (1 to 60000).
fn interval(text: &str) -> Result<Duration, ArgError> {
    match text.parse::<u64>() {
        Ok(ms @ 1..=60_000) => Ok(Duration::from_millis(ms)),
        _ => Err(ArgError::NotAnInterval(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Invocation, clap::Error> {
        parse(args.iter().map(OsString::from))
    }

    fn error_text(args: &[&str]) -> String {
        parse_strs(args).expect_err("an error").to_string()
    }

    #[test]
    fn no_argument_opens_the_demo_and_an_existing_path_opens_it() {
        assert_eq!(parse_strs(&[]).expect("ok"), Invocation::Window(None));
        let dir = std::env::temp_dir();
        let text = dir.display().to_string();
        assert_eq!(
            parse_strs(&[&text]).expect("ok"),
            Invocation::Window(Some(dir))
        );
        // A Hub repo opens the window too (it exists on the network).
        assert_eq!(
            parse_strs(&["hf://org/repo"]).expect("ok"),
            Invocation::Window(Some(std::path::PathBuf::from("hf://org/repo")))
        );
    }

    #[test]
    fn a_mistyped_subcommand_is_an_error_with_a_suggestion_never_a_window() {
        let err = parse_strs(&["inspct"]).expect_err("an error");
        assert_eq!(exit_code(&err), 2);
        assert!(err.to_string().contains("'inspect'"), "{err}");
        // Followed by arguments (the usual case), the tip is the same.
        for (typo, args, tip) in [
            ("inspct", &["/models/x"][..], "'inspect'"),
            ("chek", &["/models/x"][..], "'check'"),
            ("recrod", &["--", "ls"][..], "'record'"),
        ] {
            let mut all = vec![typo];
            all.extend_from_slice(args);
            let err = parse_strs(&all).expect_err("an error");
            assert_eq!(exit_code(&err), 2);
            assert!(err.to_string().contains(tip), "{typo}: {err}");
        }
        // clap's own `help SUBCOMMAND` is no typo.
        let help = parse_strs(&["help", "inspect"]).expect_err("help");
        assert_eq!(exit_code(&help), 0, "{help}");
    }

    #[test]
    fn every_subcommand_has_its_own_help() {
        let names = subcommands();
        assert!(
            names.len() >= 11 && names.iter().any(|n| n == "export"),
            "{names:?}"
        );
        for sub in &names {
            let err = parse_strs(&[sub, "--help"]).expect_err("help");
            assert_eq!(exit_code(&err), 0, "{sub}");
            assert!(
                err.to_string().contains("Usage: weightscope"),
                "{sub}: {err}"
            );
        }
        assert_eq!(
            exit_code(&parse_strs(&["--version"]).expect_err("version")),
            0
        );
    }

    #[test]
    fn inspect_and_tensor_take_paths_json_and_opt_equals_value() {
        let want = Invocation::Run(Command::Inspect(InspectArgs {
            path: PathBuf::from("m"),
            json: true,
            filter: None,
        }));
        assert_eq!(parse_strs(&["inspect", "m", "--json"]).expect("ok"), want);
        assert_eq!(parse_strs(&["inspect", "--json", "m"]).expect("ok"), want);
        assert!(error_text(&["inspect"]).contains("<PATH>"));
        assert_eq!(
            parse_strs(&["tensor", "m", "w", "--json"]).expect("ok"),
            Invocation::Run(Command::Tensor(TensorArgs {
                path: PathBuf::from("m"),
                name: "w".into(),
                json: true,
                repeat: 1,
                cells: false,
                warm_up: false,
            }))
        );
        assert!(matches!(
            parse_strs(&["tensor", "m", "w", "--json", "--cells"]),
            Ok(Invocation::Run(Command::Tensor(TensorArgs {
                cells: true,
                ..
            })))
        ));
        assert!(error_text(&["tensor", "m", "w", "--cells"]).contains("--json"));
        assert!(error_text(&["tensor", "m"]).contains("<NAME>"));
        assert!(error_text(&["inspect", "m", "--jsn"]).contains("--json"));
    }

    #[test]
    fn walk_takes_a_policy_and_options() {
        let Ok(Invocation::Run(Command::Walk(args))) = parse_strs(&[
            "walk",
            "m",
            "--policy=release-shard",
            "--transform",
            "q4",
            "--csv",
            "t.csv",
            "--interval-ms",
            "10",
            "--memory-limit",
            "2G",
            "--cache-limit=512M",
            "--json",
        ]) else {
            panic!("walk parses");
        };
        assert_eq!(args.policy, Policy::ReleaseShard);
        assert_eq!(args.transform, Transform::Q4);
        assert_eq!(args.csv, Some(PathBuf::from("t.csv")));
        assert_eq!(args.interval, Duration::from_millis(10));
        assert_eq!(args.memory_limit, Some(2 << 30));
        assert_eq!(args.cache_limit, Some(512 << 20));
        assert!(args.json);
        assert!(error_text(&["walk", "m"]).contains("--policy"));
        let keep = error_text(&["walk", "m", "--policy", "keep"]);
        assert!(keep.contains("release-shard"), "{keep}");
        assert!(
            error_text(&["walk", "m", "--policy", "retain", "--memory-limit", "8BBB"])
                .contains("8BBB")
        );
        assert!(
            error_text(&["walk", "m", "--policy", "retain", "--interval-ms", "0"])
                .contains("interval")
        );
        assert!(parse_strs(&["walk", "m", "x", "--policy", "retain"]).is_err());
        // Without --interval-ms: the sampler's default rate.
        let Ok(Invocation::Run(Command::Walk(args))) =
            parse_strs(&["walk", "m", "--policy", "retain"])
        else {
            panic!("walk parses");
        };
        assert_eq!(args.interval, crate::profile::DEFAULT_INTERVAL);
    }

    #[test]
    fn diff_takes_two_paths_and_views() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("v.json");
        std::fs::write(&file, "{}").expect("write");
        let file_text = file.display().to_string();
        let Ok(Invocation::Run(Command::Diff(args))) = parse_strs(&[
            "diff",
            "a",
            "--view-a",
            "qwen3-next",
            "b",
            "--view-b",
            &file_text,
            "--json",
        ]) else {
            panic!("diff parses");
        };
        assert_eq!(args.a, PathBuf::from("a"));
        assert_eq!(args.b, PathBuf::from("b"));
        assert_eq!(args.view_a, ViewChoice::Builtin("qwen3-next".into()));
        assert_eq!(args.view_b, ViewChoice::File(file));
        assert!(args.json);
        let typo = error_text(&["diff", "a", "b", "--view-a", "qwen3-nxt"]);
        assert!(
            typo.contains("qwen3-next") && typo.contains("did you mean"),
            "{typo}"
        );
        assert!(parse_strs(&["diff", "a"]).is_err());
        assert!(parse_strs(&["diff", "a", "b", "c"]).is_err());
    }

    #[test]
    fn surplus_and_unknown_arguments_are_errors() {
        assert!(parse_strs(&["device", "x"]).is_err());
        assert_eq!(
            exit_code(&parse_strs(&["--frobnicate"]).expect_err("error")),
            2
        );
        assert!(matches!(
            parse_strs(&["completions", "bash"]),
            Ok(Invocation::Run(Command::Completions {
                shell: clap_complete::Shell::Bash
            }))
        ));
    }
}
