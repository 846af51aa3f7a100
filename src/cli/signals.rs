//! SIGINT, SIGTERM and SIGHUP for the long commands (`record`, `walk`,
//! `diff`): instead of dying with nothing written, the command is told, cuts
//! its work short, writes what it has, and exits with the status a shell
//! expects of a process ended by that signal (128 + N).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The last termination signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Set when a termination signal arrives once [`watch`] runs: the cancel
/// token of a command's walk or diff.
pub static CUT_SHORT: AtomicBool = AtomicBool::new(false);

/// The signals that end a command politely.
#[cfg(unix)]
const TERMINATION: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// Calls `on_signal` with the number of each SIGINT, SIGTERM or SIGHUP this
/// process receives, on a thread of its own (`signals`), from now on. The
/// signals no longer end the process by themselves; with `exit_on_second`,
/// a second one does, at once (a walk stuck in one huge tensor still obeys
/// an impatient Ctrl+C).
///
/// # Errors
/// When the handlers cannot be installed.
#[cfg(unix)]
pub fn watch(
    exit_on_second: bool,
    on_signal: impl Fn(i32) + Send + 'static,
) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new(TERMINATION)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let earlier = RECEIVED.swap(signal, Ordering::SeqCst);
                // A write blocked on a reader that stopped reading gives up.
                crate::files::signal_arrived();
                if exit_on_second && earlier != 0 {
                    eprintln!(
                        "weightscope: a second {}: stopping now, without writing",
                        name(signal)
                    );
                    crate::mlx::exit_now(exit_status(signal));
                }
                CUT_SHORT.store(true, Ordering::SeqCst);
                on_signal(signal);
            }
        })?;
    Ok(())
}

/// The termination signal received, if any.
#[must_use]
pub fn received() -> Option<i32> {
    Some(RECEIVED.load(Ordering::SeqCst)).filter(|s| *s != 0)
}

/// The exit status of a command cut short by `signal`: 128 + N.
#[must_use]
pub fn exit_status(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(1)
}

/// "SIGTERM".
#[must_use]
pub fn name(signal: i32) -> &'static str {
    crate::profile::analysis::recording::signal_name(signal)
}
