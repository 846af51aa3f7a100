//! The `weightscope` command: the window, or a subcommand for scripts. Only
//! dispatch lives here: each subcommand runs in `src/cli/`.

use weightscope::app::shell;
use weightscope::cli::{self, Command};
use weightscope::mlx;
use weightscope::weights::demo;

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
    if let Err(code) = cli::apply_env_limits() {
        return code;
    }
    match command {
        Command::Window { path } => window(path, launched),
        command => cli::run(command),
    }
}

/// Opens the window on `path` (the bundled demo when `None`).
fn window(path: Option<std::path::PathBuf>, launched: std::time::Instant) -> u8 {
    let path = match path {
        Some(path) => path,
        None => match demo::ensure_demo(&demo::demo_dir()) {
            Ok(dir) => dir,
            Err(err) => {
                cli::say(format_args!("{err}"));
                return 1;
            }
        },
    };
    let device = mlx::default_device().map_err(|e| e.to_string());
    if let Err(err) = shell::run(Some(path), device, launched) {
        cli::say(format_args!("{err:#}"));
        return 1;
    }
    0
}
