//! The environment, read once: every `WEIGHTSCOPE_*` variable weightscope
//! reads, and the Hub token's form, parsed at the edge (`main`) into one
//! typed [`Environment`]. A value that is junk or absurd (a timeout of
//! 2^62 s or of 0, a retry count of a thousand, a token holding a line
//! break) is one line naming the variable, exit status 2, before any work;
//! never a panic, never a silent default.
//!
//! The layers read the configuration through [`get`]; the variables are
//! listed once, in [`VARIABLES`] (docs/reliability.md prints the table).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// A variable, what it takes, and its default.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What values it takes, in words.
    pub takes: &'static str,
}

/// Every variable [`read`] checks.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "WEIGHTSCOPE_HTTP_TIMEOUT",
        takes: "whole seconds, 1 to 3600 (default 30)",
    },
    Variable {
        name: "WEIGHTSCOPE_HTTP_RETRIES",
        takes: "0 to 10 (default 3)",
    },
    Variable {
        name: "WEIGHTSCOPE_MEMORY_LIMIT",
        takes: "a size such as 24G, above 0",
    },
    Variable {
        name: "WEIGHTSCOPE_CACHE_LIMIT",
        takes: "a size such as 1G",
    },
    Variable {
        name: "WEIGHTSCOPE_EXIT_AFTER_FRAMES",
        takes: "1 to 1000000 (tests)",
    },
    Variable {
        name: "WEIGHTSCOPE_SUMMARY",
        takes: "auto or ops (default auto)",
    },
    Variable {
        name: "WEIGHTSCOPE_SUMMARY_PHASES",
        takes: "0 or 1 (default 0)",
    },
    Variable {
        name: "WEIGHTSCOPE_TEST_WALL_SHIFT_SECS",
        takes: "seconds within ±10^9 (tests)",
    },
    Variable {
        name: "HF_TOKEN",
        takes: "one line of visible characters",
    },
];

/// The configuration the environment gave.
// Each switch is a variable of its own, on or off independently.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone)]
pub struct Environment {
    /// How long a server may stay silent (before answering, or within a
    /// body) before a request counts as failed.
    pub http_timeout: Duration,
    /// Attempts after the first for a failure that may pass (a time-out, a
    /// dropped connection, a truncated body, 429, 5xx).
    pub http_retries: u32,
    /// MLX's memory limit to set, in bytes.
    pub memory_limit: Option<u64>,
    /// MLX's cache limit to set, in bytes.
    pub cache_limit: Option<u64>,
    /// The window ends after this many frames (tests).
    pub exit_after_frames: Option<u64>,
    /// `WEIGHTSCOPE_SUMMARY=ops`: value summaries by MLX's own ops even
    /// where our kernels would run (the fallback path, for diagnosis and
    /// to compare with).
    pub summary_ops: bool,
    /// Summary phases timed and printed.
    pub summary_phases: bool,
    /// Seconds added to the wall clock a recording states (tests: one
    /// machine's journals then look taken on hosts whose clocks disagree).
    pub wall_shift_secs: f64,
    /// The variables of the world outside weightscope it reads.
    pub outside: Outside,
}

/// Variables of the world outside weightscope that it reads (where its
/// files go, the Hub, a distributed job's host and rank), as they were
/// when the process started; each `None` where unset or empty.
#[derive(Debug, Clone, Default)]
pub struct Outside {
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `XDG_CACHE_HOME`.
    pub xdg_cache_home: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<PathBuf>,
    /// `XDG_RUNTIME_DIR`.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// `WEIGHTSCOPE_CACHE_DIR`: weightscope's cache folder, when chosen.
    pub cache_dir: Option<PathBuf>,
    /// `HOSTNAME` (when the kernel's hostname cannot be read).
    pub hostname: Option<String>,
    /// `MLX_RANK`: a distributed job's rank.
    pub mlx_rank: Option<String>,
    /// `MLX_HOSTFILE`: a distributed job's hosts (the ring backend's).
    pub mlx_hostfile: Option<PathBuf>,
    /// `MLX_WORLD_SIZE`: the job's ranks (the NCCL backend's).
    pub mlx_world_size: Option<String>,
    /// `MLX_IBV_DEVICES`: the RDMA devices between ranks (the JACCL
    /// backend's; one row a rank).
    pub mlx_ibv_devices: Option<PathBuf>,
    /// `OMPI_COMM_WORLD_RANK` and `OMPI_COMM_WORLD_SIZE` (Open MPI's
    /// `mpirun`, the MPI backend).
    pub ompi_rank: Option<String>,
    /// See `ompi_rank`.
    pub ompi_size: Option<String>,
    /// `PMI_RANK` and `PMI_SIZE` (MPICH's `mpirun`).
    pub pmi_rank: Option<String>,
    /// See `pmi_rank`.
    pub pmi_size: Option<String>,
    /// `PYTHONPATH`, which a recorded job's gets the probe's folder before.
    pub pythonpath: Option<OsString>,
    /// `HF_ENDPOINT`.
    pub hf_endpoint: Option<String>,
    /// `HF_HUB_OFFLINE`.
    pub hf_hub_offline: Option<String>,
    /// `HF_TOKEN`.
    pub hf_token: Option<String>,
    /// `HF_TOKEN_PATH`.
    pub hf_token_path: Option<PathBuf>,
    /// `HF_HOME`.
    pub hf_home: Option<PathBuf>,
    /// `WEIGHTSCOPE_KERNEL_CACHE`: where our compiled CUDA kernels are
    /// kept, when chosen.
    pub kernel_cache: Option<PathBuf>,
    /// `CUDA_HOME` and `CUDA_PATH`, where CUDA's headers may be.
    pub cuda_homes: Vec<PathBuf>,
}

impl Outside {
    /// Reads them from `source` (the process's environment in [`read`]).
    #[must_use]
    pub fn read_from(source: &dyn Fn(&str) -> Option<OsString>) -> Self {
        let os = |name: &str| source(name).filter(|v| !v.is_empty());
        let path = |name: &str| os(name).map(PathBuf::from);
        let text = |name: &str| os(name).map(|v| v.to_string_lossy().into_owned());
        Self {
            home: path("HOME"),
            xdg_cache_home: path("XDG_CACHE_HOME"),
            xdg_config_home: path("XDG_CONFIG_HOME"),
            xdg_runtime_dir: path("XDG_RUNTIME_DIR"),
            cache_dir: path("WEIGHTSCOPE_CACHE_DIR"),
            hostname: text("HOSTNAME"),
            mlx_rank: text("MLX_RANK"),
            mlx_hostfile: path("MLX_HOSTFILE"),
            mlx_world_size: text("MLX_WORLD_SIZE"),
            mlx_ibv_devices: path("MLX_IBV_DEVICES"),
            ompi_rank: text("OMPI_COMM_WORLD_RANK"),
            ompi_size: text("OMPI_COMM_WORLD_SIZE"),
            pmi_rank: text("PMI_RANK"),
            pmi_size: text("PMI_SIZE"),
            pythonpath: os("PYTHONPATH"),
            hf_endpoint: text("HF_ENDPOINT"),
            hf_hub_offline: text("HF_HUB_OFFLINE"),
            hf_token: text("HF_TOKEN"),
            hf_token_path: path("HF_TOKEN_PATH"),
            hf_home: path("HF_HOME"),
            kernel_cache: path("WEIGHTSCOPE_KERNEL_CACHE"),
            cuda_homes: ["CUDA_HOME", "CUDA_PATH"]
                .iter()
                .filter_map(|name| path(name))
                .collect(),
        }
    }

    /// `$XDG_CACHE_HOME`, else `$HOME/.cache`.
    #[must_use]
    pub fn user_cache(&self) -> Option<PathBuf> {
        self.xdg_cache_home
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".cache")))
    }

    /// `$XDG_CONFIG_HOME`, else `$HOME/.config`.
    #[must_use]
    pub fn user_config(&self) -> Option<PathBuf> {
        self.xdg_config_home
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".config")))
    }
}

impl Default for Environment {
    fn default() -> Self {
        Self {
            http_timeout: Duration::from_secs(30),
            http_retries: 3,
            memory_limit: None,
            cache_limit: None,
            exit_after_frames: None,
            summary_ops: false,
            summary_phases: false,
            wall_shift_secs: 0.0,
            outside: Outside::default(),
        }
    }
}

/// A variable whose value cannot be used: one line naming it.
#[derive(Debug, thiserror::Error)]
#[error("{name}=`{value}` is not usable: it takes {takes}")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value, shown (escaped, cut to 40 characters; a token's never).
    pub value: String,
    /// What it takes.
    pub takes: &'static str,
}

fn takes(name: &str) -> &'static str {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .map_or("another value", |v| v.takes)
}

/// The value of `name` where it is set (an empty value is unset).
fn raw(source: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    source(name).filter(|v| !v.is_empty())
}

fn bad(name: &'static str, value: &str) -> EnvError {
    let shown = crate::units::Shown::new(value);
    let mut value: String = shown.chars().take(40).collect();
    if shown.chars().count() > 40 {
        value.push('…');
    }
    EnvError {
        name,
        value,
        takes: takes(name),
    }
}

fn number(
    source: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, EnvError> {
    let Some(value) = raw(source, name) else {
        return Ok(None);
    };
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|n| range.contains(n))
        .map(Some)
        .ok_or_else(|| bad(name, &value))
}

fn switch(
    source: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: bool,
) -> Result<bool, EnvError> {
    match raw(source, name).as_deref().map(str::trim) {
        None => Ok(default),
        Some("1" | "true" | "on" | "yes") => Ok(true),
        Some("0" | "false" | "off" | "no") => Ok(false),
        Some(other) => Err(bad(name, other)),
    }
}

fn size(
    source: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    at_least: u64,
) -> Result<Option<u64>, EnvError> {
    let Some(value) = raw(source, name) else {
        return Ok(None);
    };
    crate::units::parse_size(&value)
        .filter(|b| *b >= at_least)
        .map(Some)
        .ok_or_else(|| bad(name, &value))
}

/// Reads the configuration from `source` (the process's environment in
/// [`read`]; a map in tests).
///
/// # Errors
/// The first variable whose value cannot be used.
pub fn read_from(source: &dyn Fn(&str) -> Option<String>) -> Result<Environment, EnvError> {
    let defaults = Environment::default();
    let summary_ops = match raw(source, "WEIGHTSCOPE_SUMMARY").as_deref().map(str::trim) {
        None | Some("auto") => false,
        Some("ops") => true,
        Some(other) => return Err(bad("WEIGHTSCOPE_SUMMARY", other)),
    };
    let wall_shift_secs = match raw(source, "WEIGHTSCOPE_TEST_WALL_SHIFT_SECS") {
        None => 0.0,
        Some(value) => value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && v.abs() <= 1e9)
            .ok_or_else(|| bad("WEIGHTSCOPE_TEST_WALL_SHIFT_SECS", &value))?,
    };
    // A token goes into an HTTP header: a line break or a control byte in
    // it is a mistake (a file pasted whole), said by name, never echoed.
    if let Some(token) = source("HF_TOKEN")
        && token
            .trim()
            .chars()
            .any(|c| c.is_control() || !(c.is_ascii_graphic() || c == ' '))
    {
        return Err(EnvError {
            name: "HF_TOKEN",
            value: "…".into(),
            takes: takes("HF_TOKEN"),
        });
    }
    Ok(Environment {
        http_timeout: number(source, "WEIGHTSCOPE_HTTP_TIMEOUT", 1..=3600)?
            .map_or(defaults.http_timeout, Duration::from_secs),
        http_retries: number(source, "WEIGHTSCOPE_HTTP_RETRIES", 0..=10)?
            .map_or(defaults.http_retries, |n| u32::try_from(n).unwrap_or(3)),
        memory_limit: size(source, "WEIGHTSCOPE_MEMORY_LIMIT", 1)?,
        cache_limit: size(source, "WEIGHTSCOPE_CACHE_LIMIT", 0)?,
        exit_after_frames: number(source, "WEIGHTSCOPE_EXIT_AFTER_FRAMES", 1..=1_000_000)?,
        summary_ops,
        summary_phases: switch(source, "WEIGHTSCOPE_SUMMARY_PHASES", false)?,
        wall_shift_secs,
        outside: Outside::default(),
    })
}

/// Reads the configuration from the process's environment.
///
/// # Errors
/// As [`read_from`].
pub fn read() -> Result<Environment, EnvError> {
    let mut environment =
        read_from(&|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))?;
    environment.outside = Outside::read_from(&|name| std::env::var_os(name));
    Ok(environment)
}

/// The value the process was started with for `name`, for what must run
/// before the configuration is read (MLX's kernel cache and the window's
/// drawing threads are set up with no other thread alive) and for tests'
/// own switches: every variable is still read here, in this module.
#[must_use]
pub fn started_with(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name)
}

static CONFIG: OnceLock<Environment> = OnceLock::new();

/// Keeps `environment` as the process's configuration (at the edge, before
/// any layer reads it). Later calls change nothing.
pub fn install(environment: Environment) {
    let _ = CONFIG.set(environment);
}

/// The process's configuration: the one installed at the edge; where none
/// was (a library user, a test), the environment's, or the defaults when
/// a value cannot be used.
#[must_use]
pub fn get() -> &'static Environment {
    CONFIG.get_or_init(|| {
        read().unwrap_or_else(|_| Environment {
            outside: Outside::read_from(&|name| std::env::var_os(name)),
            ..Environment::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Environment, EnvError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        read_from(&move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn junk_and_absurd_values_name_their_variable() {
        for (name, value) in [
            ("WEIGHTSCOPE_HTTP_TIMEOUT", "4611686018427387904"),
            ("WEIGHTSCOPE_HTTP_TIMEOUT", "0"),
            ("WEIGHTSCOPE_HTTP_TIMEOUT", "soon"),
            ("WEIGHTSCOPE_HTTP_RETRIES", "1000"),
            ("WEIGHTSCOPE_MEMORY_LIMIT", "lots"),
            ("WEIGHTSCOPE_MEMORY_LIMIT", "0"),
            ("WEIGHTSCOPE_SUMMARY_PHASES", "nope"),
            ("WEIGHTSCOPE_SUMMARY", "gpu"),
            ("WEIGHTSCOPE_TEST_WALL_SHIFT_SECS", "1e999"),
        ] {
            let err = with(&[(name, value)]).expect_err(value);
            let line = err.to_string();
            assert!(line.starts_with(name), "{line}");
            assert!(line.contains("it takes"), "{line}");
            assert!(!line.contains('\n'));
        }
        let env = with(&[
            ("WEIGHTSCOPE_HTTP_TIMEOUT", "5"),
            ("WEIGHTSCOPE_HTTP_RETRIES", "0"),
            ("WEIGHTSCOPE_SUMMARY", "ops"),
            ("WEIGHTSCOPE_MEMORY_LIMIT", "8G"),
        ])
        .expect("good values");
        assert_eq!(env.http_timeout, Duration::from_secs(5));
        assert_eq!(env.http_retries, 0);
        assert!(env.summary_ops);
        assert_eq!(env.memory_limit, Some(8 << 30));
    }

    #[test]
    fn a_token_with_a_line_break_is_named_and_never_echoed() {
        let err = with(&[("HF_TOKEN", "hf_SECRET\r\nX-Evil: 1")]).expect_err("a line break");
        let line = err.to_string();
        assert!(line.starts_with("HF_TOKEN="), "{line}");
        assert!(!line.contains("SECRET"), "{line}");
        assert!(with(&[("HF_TOKEN", "hf_abcDEF123")]).is_ok());
    }
}
