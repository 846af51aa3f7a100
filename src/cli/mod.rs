//! Command-line parsing and output formats.

pub mod check;
pub mod diff;
pub mod inspect;
pub mod tensor;
pub mod walk;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::profile::{DEFAULT_INTERVAL, Policy, Transform};
use crate::weights::ViewChoice;
pub use check::CheckArgs;
pub use diff::DiffArgs;
pub use walk::WalkArgs;

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Open the window on a checkpoint (`None`: the bundled demo).
    Window {
        /// A folder or one `.safetensors` file.
        path: Option<PathBuf>,
    },
    /// Print MLX's device and memory counters.
    Device,
    /// Materialize one tensor through MLX and print its summary.
    Tensor {
        /// A folder or one `.safetensors` file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// JSON instead of text.
        json: bool,
    },
    /// Print the header summary of a checkpoint.
    Inspect {
        /// A folder or one `.safetensors` file.
        path: PathBuf,
        /// JSON instead of text.
        json: bool,
    },
    /// Walk every tensor under a release policy, recording memory.
    Walk(WalkArgs),
    /// Compare two checkpoints tensor by tensor.
    Diff(DiffArgs),
    /// Find what is wrong with a checkpoint that opens.
    Check(CheckArgs),
    /// Print usage.
    Help,
    /// Print the version.
    Version,
}

/// The usage text.
pub const USAGE: &str = "\
usage: weightscope [PATH]                 open the window (no PATH: the bundled demo)
       weightscope inspect PATH [--json]  header summary: shards, tensors, totals
       weightscope tensor PATH NAME [--json]  materialize one tensor through MLX: stats, first values
       weightscope walk PATH --policy retain|release-tensor|release-shard
                   [--transform none|f16|q4] [--json] [--csv FILE] [--trace FILE]
                   [--interval-ms N] [--memory-limit SIZE] [--cache-limit SIZE]
                                          materialize every tensor in shard order, record memory
       weightscope diff A B [--json] [--view-a VIEW] [--view-b VIEW]
                                          compare two checkpoints tensor by tensor on MLX
       weightscope check PATH [--json] [--values]
                                          what is wrong with a checkpoint (exit 1 on errors)
       weightscope device                 print MLX's device and memory counters
VIEW: auto (default), identity, qwen3-next, or a view file (docs/views.md)
       weightscope --help | --version";

/// Errors in the command line itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsageError {
    /// An option this command does not know.
    #[error("unknown option `{0}`")]
    UnknownOption(String),
    /// More arguments than the command takes.
    #[error("unexpected argument `{0}`")]
    Unexpected(String),
    /// A command is missing an argument.
    #[error("`{0}` needs {1}")]
    Missing(&'static str, &'static str),
    /// An option's value is not one it takes.
    #[error("`{option}` does not take `{value}` ({expected})")]
    BadValue {
        /// The option.
        option: &'static str,
        /// What was given.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
}

fn parse_diff(args: &[OsString]) -> Result<Command, UsageError> {
    let mut paths = Vec::new();
    let (mut json, mut view_a, mut view_b) = (false, ViewChoice::Auto, ViewChoice::Auto);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy();
        let mut value = |option: &'static str| {
            rest.next()
                .map(|v| v.to_string_lossy().into_owned())
                .ok_or(UsageError::Missing(option, "a value"))
        };
        match text.as_ref() {
            "--json" => json = true,
            "--view-a" => view_a = ViewChoice::parse(&value("--view-a")?),
            "--view-b" => view_b = ViewChoice::parse(&value("--view-b")?),
            opt if opt.starts_with("--") => return Err(UsageError::UnknownOption(opt.to_owned())),
            _ if paths.len() < 2 => paths.push(PathBuf::from(arg)),
            other => return Err(UsageError::Unexpected(other.to_owned())),
        }
    }
    let mut paths = paths.into_iter();
    let a = paths
        .next()
        .ok_or(UsageError::Missing("diff", "two paths, A and B"))?;
    let b = paths
        .next()
        .ok_or(UsageError::Missing("diff", "two paths, A and B"))?;
    Ok(Command::Diff(DiffArgs {
        a,
        b,
        view_a,
        view_b,
        json,
    }))
}

fn parse_check(args: &[OsString]) -> Result<Command, UsageError> {
    let (mut path, mut json, mut values) = (None, false, false);
    for arg in args {
        match arg.to_string_lossy().as_ref() {
            "--json" => json = true,
            "--values" => values = true,
            opt if opt.starts_with("--") => return Err(UsageError::UnknownOption(opt.to_owned())),
            other if path.is_some() => return Err(UsageError::Unexpected(other.to_owned())),
            _ => path = Some(PathBuf::from(arg)),
        }
    }
    Ok(Command::Check(CheckArgs {
        path: path.ok_or(UsageError::Missing("check", "a PATH"))?,
        json,
        values,
    }))
}

fn parse_walk(args: &[OsString]) -> Result<Command, UsageError> {
    let mut path = None;
    let mut policy = None;
    let mut transform = Transform::None;
    let mut json = false;
    let (mut csv, mut trace, mut memory_limit, mut cache_limit) = (None, None, None, None);
    let mut interval = DEFAULT_INTERVAL;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let text = arg.to_string_lossy();
        let mut value = |option: &'static str| {
            rest.next()
                .cloned()
                .ok_or(UsageError::Missing(option, "a value"))
        };
        match text.as_ref() {
            "--json" => json = true,
            "--policy" => {
                let v = value("--policy")?.to_string_lossy().into_owned();
                policy = Some(Policy::parse(&v).ok_or(UsageError::BadValue {
                    option: "--policy",
                    value: v,
                    expected: "retain, release-tensor or release-shard",
                })?);
            }
            "--transform" => {
                let v = value("--transform")?.to_string_lossy().into_owned();
                transform = Transform::parse(&v).ok_or(UsageError::BadValue {
                    option: "--transform",
                    value: v,
                    expected: "none, f16 or q4",
                })?;
            }
            "--csv" => csv = Some(PathBuf::from(value("--csv")?)),
            "--trace" => trace = Some(PathBuf::from(value("--trace")?)),
            "--interval-ms" => {
                let v = value("--interval-ms")?.to_string_lossy().into_owned();
                let ms = v.parse::<u64>().ok().filter(|ms| (1..=60_000).contains(ms));
                interval = Duration::from_millis(ms.ok_or(UsageError::BadValue {
                    option: "--interval-ms",
                    value: v,
                    expected: "milliseconds from 1 to 60000",
                })?);
            }
            "--memory-limit" => {
                let v = value("--memory-limit")?.to_string_lossy().into_owned();
                memory_limit = Some(walk::parse_size(&v).filter(|b| *b > 0).ok_or(
                    UsageError::BadValue {
                        option: "--memory-limit",
                        value: v,
                        expected: "a size such as 8G or 512M",
                    },
                )?);
            }
            "--cache-limit" => {
                let v = value("--cache-limit")?.to_string_lossy().into_owned();
                cache_limit = Some(walk::parse_size(&v).ok_or(UsageError::BadValue {
                    option: "--cache-limit",
                    value: v,
                    expected: "a size such as 1G, or 0",
                })?);
            }
            opt if opt.starts_with("--") => return Err(UsageError::UnknownOption(opt.to_owned())),
            _ if path.is_none() => path = Some(PathBuf::from(arg)),
            other => return Err(UsageError::Unexpected(other.to_owned())),
        }
    }
    Ok(Command::Walk(WalkArgs {
        path: path.ok_or(UsageError::Missing("walk", "a PATH"))?,
        policy: policy.ok_or(UsageError::Missing(
            "walk",
            "--policy retain|release-tensor|release-shard",
        ))?,
        transform,
        json,
        csv,
        trace,
        interval,
        memory_limit,
        cache_limit,
    }))
}

/// Parses the arguments after the program name.
///
/// # Errors
/// On an unknown option or a surplus argument.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, UsageError> {
    let args: Vec<OsString> = args.into_iter().collect();
    let word = |i: usize| args.get(i).map(|a| a.to_string_lossy().into_owned());
    let (command, used) = match word(0).as_deref() {
        None => (Command::Window { path: None }, 0),
        Some("-h" | "--help" | "help") => (Command::Help, 1),
        Some("-V" | "--version") => (Command::Version, 1),
        Some("device") => (Command::Device, 1),
        Some("walk") => (parse_walk(&args[1..])?, args.len()),
        Some("diff") => (parse_diff(&args[1..])?, args.len()),
        Some("check") => (parse_check(&args[1..])?, args.len()),
        Some(command @ ("inspect" | "tensor")) => {
            let mut positional = Vec::new();
            let mut json = false;
            for arg in args.iter().skip(1) {
                match arg.to_string_lossy().as_ref() {
                    "--json" => json = true,
                    opt if opt.starts_with("--") => {
                        return Err(UsageError::UnknownOption(opt.to_owned()));
                    }
                    _ => positional.push(arg.clone()),
                }
            }
            let wanted = if command == "inspect" { 1 } else { 2 };
            if let Some(extra) = positional.get(wanted) {
                return Err(UsageError::Unexpected(extra.to_string_lossy().into_owned()));
            }
            let path = positional
                .first()
                .map(PathBuf::from)
                .ok_or(UsageError::Missing(
                    if command == "inspect" {
                        "inspect"
                    } else {
                        "tensor"
                    },
                    "a PATH",
                ))?;
            let parsed = if command == "inspect" {
                Command::Inspect { path, json }
            } else {
                let name = positional
                    .get(1)
                    .map(|n| n.to_string_lossy().into_owned())
                    .ok_or(UsageError::Missing("tensor", "a tensor NAME"))?;
                Command::Tensor { path, name, json }
            };
            (parsed, args.len())
        }
        Some(opt) if opt.starts_with('-') => return Err(UsageError::UnknownOption(opt.to_owned())),
        Some(_) => (
            Command::Window {
                path: args.first().map(PathBuf::from),
            },
            1,
        ),
    };
    if let Some(extra) = args.get(used) {
        return Err(UsageError::Unexpected(extra.to_string_lossy().into_owned()));
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn no_argument_opens_the_demo() {
        assert_eq!(parse_strs(&[]), Ok(Command::Window { path: None }));
    }

    #[test]
    fn a_path_opens_that_path() {
        assert_eq!(
            parse_strs(&["/models/x"]),
            Ok(Command::Window {
                path: Some(PathBuf::from("/models/x"))
            })
        );
    }

    #[test]
    fn inspect_takes_a_path_and_json_in_any_order() {
        let want = Command::Inspect {
            path: PathBuf::from("m"),
            json: true,
        };
        assert_eq!(parse_strs(&["inspect", "m", "--json"]), Ok(want.clone()));
        assert_eq!(parse_strs(&["inspect", "--json", "m"]), Ok(want));
        assert_eq!(
            parse_strs(&["inspect"]),
            Err(UsageError::Missing("inspect", "a PATH"))
        );
        assert_eq!(
            parse_strs(&["tensor", "m", "w", "--json"]),
            Ok(Command::Tensor {
                path: PathBuf::from("m"),
                name: "w".into(),
                json: true
            })
        );
        assert_eq!(
            parse_strs(&["tensor", "m"]),
            Err(UsageError::Missing("tensor", "a tensor NAME"))
        );
        assert_eq!(
            parse_strs(&["inspect", "m", "--yaml"]),
            Err(UsageError::UnknownOption("--yaml".into()))
        );
    }

    #[test]
    fn walk_takes_a_policy_and_options() {
        let Ok(Command::Walk(args)) = parse_strs(&[
            "walk",
            "m",
            "--policy",
            "release-shard",
            "--transform",
            "q4",
            "--csv",
            "t.csv",
            "--interval-ms",
            "10",
            "--memory-limit",
            "2G",
            "--cache-limit",
            "512M",
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
        assert_eq!(
            parse_strs(&["walk", "m"]),
            Err(UsageError::Missing(
                "walk",
                "--policy retain|release-tensor|release-shard"
            ))
        );
        assert!(matches!(
            parse_strs(&["walk", "m", "--policy", "keep"]),
            Err(UsageError::BadValue {
                option: "--policy",
                ..
            })
        ));
        assert_eq!(
            parse_strs(&["walk", "m", "--policy"]),
            Err(UsageError::Missing("--policy", "a value"))
        );
        assert_eq!(
            parse_strs(&["walk", "m", "x", "--policy", "retain"]),
            Err(UsageError::Unexpected("x".into()))
        );
    }

    #[test]
    fn diff_takes_two_paths_and_views() {
        let Ok(Command::Diff(args)) = parse_strs(&[
            "diff",
            "a",
            "--view-a",
            "qwen3-next",
            "b",
            "--view-b",
            "v.json",
            "--json",
        ]) else {
            panic!("diff parses");
        };
        assert_eq!(args.a, PathBuf::from("a"));
        assert_eq!(args.b, PathBuf::from("b"));
        assert_eq!(args.view_a, ViewChoice::Builtin("qwen3-next".into()));
        assert_eq!(args.view_b, ViewChoice::File(PathBuf::from("v.json")));
        assert!(args.json);
        assert_eq!(
            parse_strs(&["diff", "a"]),
            Err(UsageError::Missing("diff", "two paths, A and B"))
        );
        assert_eq!(
            parse_strs(&["diff", "a", "b", "c"]),
            Err(UsageError::Unexpected("c".into()))
        );
    }

    #[test]
    fn surplus_and_unknown_arguments_are_errors() {
        assert_eq!(
            parse_strs(&["a", "b"]),
            Err(UsageError::Unexpected("b".into()))
        );
        assert_eq!(
            parse_strs(&["device", "x"]),
            Err(UsageError::Unexpected("x".into()))
        );
        assert_eq!(
            parse_strs(&["--frobnicate"]),
            Err(UsageError::UnknownOption("--frobnicate".into()))
        );
    }
}
