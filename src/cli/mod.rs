//! Command-line parsing and output formats.

pub mod inspect;
pub mod tensor;

use std::ffi::OsString;
use std::path::PathBuf;

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
       weightscope device                 print MLX's device and memory counters
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
