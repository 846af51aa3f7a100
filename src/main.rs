//! The `weightscope` command: the window, or a subcommand for scripts. Only
//! dispatch lives here: the window in `app::shell`, each subcommand in
//! `src/cli/` (`tests/plain/layers.rs` holds this file to those two).

use weightscope::app::shell;
use weightscope::cli::{self, Invocation};

fn main() {
    let launched = std::time::Instant::now();
    #[allow(unsafe_code)]
    // SAFETY: the first thing the process does, with no other thread yet.
    unsafe {
        cli::prepare_process();
    }
    let code = match cli::parse(std::env::args_os().skip(1)) {
        // Help and version on stdout, mistakes on stderr, as clap decides.
        Err(err) => {
            cli::print_parse_error(&err);
            cli::exit_code(&err)
        }
        Ok(invocation) => {
            if matches!(invocation, Invocation::Window(_)) {
                #[allow(unsafe_code)]
                // SAFETY: no thread has started yet (parsing the arguments
                // starts none; MLX's limits are set after this).
                unsafe {
                    shell::prepare_window_process();
                }
            }
            match cli::apply_env_limits() {
                Err(code) => code,
                Ok(()) => match invocation {
                    Invocation::Window(path) => shell::main(path, launched),
                    Invocation::Run(command) => cli::run(command),
                },
            }
        }
    };
    cli::exit(code)
}
