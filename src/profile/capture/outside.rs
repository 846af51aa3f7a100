//! A Python job's stacks read from outside its process, as py-spy reads
//! them (the `py-spy` crate's library: `process_vm_readv` with the
//! interpreter's own struct layout for its exact version): nothing runs in
//! the job, and the job is not paused (py-spy's non-blocking mode; a stack
//! read while it changes is dropped, the next one taken).
//!
//! What is read becomes the probe's own lines (`hello`, `frame`,
//! `stack-def`, `stack`), sent on the channel the probe's pipe feeds, so
//! the recorder, the journal and the analyses take them as they take the
//! probe's. Used by `record --pid` (issue #72: the first part of reading
//! the job from outside).

use std::collections::HashMap;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

/// Distinct frames and stacks defined for one job; past them a stack is
/// sent as unknown (-1) and nothing more is defined (the recorder's own
/// tables have their caps too).
const MAX_DEFINED: usize = 1 << 16;
/// Frames of one stack kept, innermost first (the journal reads 256).
const MAX_DEPTH: usize = 256;
/// Bytes of a file or function name kept (cut on a character).
const MAX_NAME_BYTES: usize = 1024;

/// The reader of one process's stacks.
pub struct OutsideStacks {
    pid: u32,
    spy: py_spy::PythonSpy,
    frames: HashMap<(String, i32, String), u64>,
    stacks: HashMap<Vec<u64>, u64>,
}

/// Why a process's stacks cannot be read from outside, in words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotRead(String);

impl OutsideStacks {
    /// Reads the interpreter of `pid` (its version and where its state
    /// is).
    ///
    /// # Errors
    /// When `pid` is not a Python process py-spy knows, or its memory may
    /// not be read (another user's process without `CAP_SYS_PTRACE`, or
    /// Yama's `ptrace_scope` above 0 for a process that is not a child).
    pub fn attach(pid: u32) -> Result<Self, NotRead> {
        let config = py_spy::Config {
            blocking: py_spy::config::LockingStrategy::NonBlocking,
            ..py_spy::Config::default()
        };
        let raw = i32::try_from(pid).map_err(|_| NotRead(format!("pid {pid} is out of range")))?;
        let spy = py_spy::PythonSpy::new(raw, &config).map_err(|err| NotRead(explain(&err)))?;
        Ok(Self {
            pid,
            spy,
            frames: HashMap::new(),
            stacks: HashMap::new(),
        })
    }

    /// The interpreter's version (`3.12.1`).
    #[must_use]
    pub fn version(&self) -> String {
        self.spy.version.to_string()
    }

    /// One reading of every thread's stack, as probe lines: the new
    /// frames' and stacks' definitions, then one `stack` line (the main
    /// thread's stack and the others'). `None` when the process is gone.
    pub fn lines(&mut self) -> Option<Vec<String>> {
        let Ok(traces) = self.spy.get_stack_traces() else {
            // Gone, or read while it changed: the caller asks again.
            return crate::profile::capture::procfs::is_alive(self.pid).then(Vec::new);
        };
        let mut lines = Vec::new();
        let mut main = -1_i64;
        let mut others = Vec::new();
        for trace in &traces {
            let id = self.stack_of(&trace.frames, &mut lines);
            let is_main = trace.os_thread_id == Some(u64::from(self.pid))
                || (trace.os_thread_id.is_none()
                    && trace.thread_name.as_deref() == Some("MainThread"));
            if is_main {
                main = id;
            } else {
                others.push(id);
            }
        }
        lines.push(
            serde_json::json!({
                "kind": "stack", "pid": self.pid, "stack": main, "threads": others,
            })
            .to_string(),
        );
        Some(lines)
    }

    /// The number of the stack `frames` (innermost first), defining it and
    /// its new frames in `lines`; -1 past the caps or for no frames.
    fn stack_of(&mut self, frames: &[py_spy::Frame], lines: &mut Vec<String>) -> i64 {
        if frames.is_empty() {
            return -1;
        }
        let mut ids = Vec::with_capacity(frames.len().min(MAX_DEPTH));
        for frame in frames.iter().take(MAX_DEPTH) {
            let key = (cut(&frame.filename), frame.line, cut(&frame.name));
            let next = self.frames.len() as u64;
            let id = match self.frames.get(&key) {
                Some(&id) => id,
                None if self.frames.len() >= MAX_DEFINED => return -1,
                None => {
                    lines.push(
                        serde_json::json!({
                            "kind": "frame", "pid": self.pid, "id": next,
                            "file": key.0, "line": key.1.max(0), "function": key.2,
                        })
                        .to_string(),
                    );
                    self.frames.insert(key, next);
                    next
                }
            };
            ids.push(id);
        }
        if let Some(&id) = self.stacks.get(&ids) {
            return i64::try_from(id).unwrap_or(-1);
        }
        if self.stacks.len() >= MAX_DEFINED {
            return -1;
        }
        let id = self.stacks.len() as u64;
        lines.push(
            serde_json::json!({
                "kind": "stack-def", "pid": self.pid, "id": id, "frames": ids,
            })
            .to_string(),
        );
        self.stacks.insert(ids, id);
        i64::try_from(id).unwrap_or(-1)
    }
}

/// `text` cut to [`MAX_NAME_BYTES`] on a character.
fn cut(text: &str) -> String {
    if text.len() <= MAX_NAME_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_NAME_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// py-spy's error as what the user can do about it.
fn explain(err: &anyhow::Error) -> String {
    let said = format!("{err:#}");
    let denied = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    }) || said.contains("ermission denied")
        || said.contains("Operation not permitted");
    if denied {
        "its memory may not be read: the same user and Yama's ptrace_scope 0 \
         (/proc/sys/kernel/yama/ptrace_scope), or CAP_SYS_PTRACE (root)"
            .to_owned()
    } else {
        format!("not a Python process py-spy can read ({said})")
    }
}

/// Reads the stacks of the process `stacks` reads every `interval` on a
/// thread of its own (`outside-stacks`) and sends them as probe lines on
/// `lines`, until the process ends or nobody listens.
///
/// # Errors
/// When the thread cannot be started.
pub fn read_every(
    mut stacks: OutsideStacks,
    interval: Duration,
    lines: SyncSender<(Instant, String)>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("outside-stacks".into())
        .spawn(move || {
            let hello = serde_json::json!({
                "kind": "hello", "pid": stacks.pid, "client": "outside",
            });
            if lines.send((Instant::now(), hello.to_string())).is_err() {
                return;
            }
            let mut next = Instant::now();
            while let Some(read) = stacks.lines() {
                let at = Instant::now();
                for line in read {
                    if lines.send((at, line)).is_err() {
                        return;
                    }
                }
                next += interval;
                let now = Instant::now();
                if next < now {
                    next = now;
                }
                std::thread::sleep(next - now);
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_on_a_character() {
        assert_eq!(cut("fold.py"), "fold.py");
        let long = "é".repeat(MAX_NAME_BYTES);
        let kept = cut(&long);
        assert!(kept.len() <= MAX_NAME_BYTES);
        assert_eq!(kept.len(), MAX_NAME_BYTES, "512 two-byte characters");
        assert!(long.starts_with(&kept));
        let odd = format!("x{long}");
        assert_eq!(
            cut(&odd).len(),
            MAX_NAME_BYTES - 1,
            "not inside a character"
        );
    }
}
