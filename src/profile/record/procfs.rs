//! A process tree as Linux's `/proc` shows it: each process's memory, bytes
//! read, and the `.safetensors` files it holds open.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::memory::ProcessFigures;

/// One process's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessReading {
    /// `VmRSS`, `RssAnon`, `RssFile`(+`RssShmem`), `VmHWM`.
    pub memory: ProcessFigures,
    /// `rchar` of `/proc/PID/io`: bytes read through read calls (page cache
    /// hits included; pages of a mapped file are not counted).
    pub read_bytes: u64,
    /// The `.safetensors` files among its open descriptors.
    pub open_files: Vec<PathBuf>,
}

/// The figures of `pid`, or `None` when it is gone (or not ours to read).
#[must_use]
pub fn read_process(pid: u32) -> Option<ProcessReading> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let status = std::fs::read_to_string(base.join("status")).ok()?;
    // A zombie has exited: it holds no memory and no files.
    if status
        .lines()
        .any(|l| l.starts_with("State:") && l.contains('Z'))
    {
        return None;
    }
    let memory = ProcessFigures::parse_status(&status);
    let read_bytes = std::fs::read_to_string(base.join("io"))
        .ok()
        .and_then(|io| parse_io_rchar(&io))
        .unwrap_or(0);
    let mut open_files = Vec::new();
    if let Ok(fds) = std::fs::read_dir(base.join("fd")) {
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if is_safetensors(&target) {
                open_files.push(target);
            }
        }
    }
    open_files.sort();
    open_files.dedup();
    Some(ProcessReading {
        memory,
        read_bytes,
        open_files,
    })
}

/// A process's proportional set size from `/proc/PID/smaps_rollup`: each
/// page shared by N processes counts 1/N in each, so the sum over a tree of
/// forked workers counts a shared page once. `(pss, anon, file + shmem)` in
/// bytes; `None` where the file is missing or the process is gone.
#[must_use]
pub fn read_pss(pid: u32) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    parse_pss(&text)
}

/// [`read_pss`] from the text of `smaps_rollup`.
#[must_use]
pub fn parse_pss(text: &str) -> Option<(u64, u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    let pss = field("Pss:")?;
    let anon = field("Pss_Anon:").unwrap_or(0);
    let file = field("Pss_File:").unwrap_or(0) + field("Pss_Shmem:").unwrap_or(0);
    Some((pss, anon, file))
}

fn is_safetensors(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// `rchar` from the text of `/proc/PID/io`.
#[must_use]
pub fn parse_io_rchar(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("rchar:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The parent pid from the text of `/proc/PID/stat` (the field after the
/// command name, which may itself hold spaces and parentheses).
#[must_use]
pub fn parse_stat_ppid(text: &str) -> Option<u32> {
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// `root` and every process descended from it, by a scan of `/proc`.
#[must_use]
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            if let Some(ppid) = parse_stat_ppid(&stat) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut tree = vec![root];
    let mut seen: HashSet<u32> = HashSet::from([root]);
    let mut at = 0;
    while let Some(&pid) = tree.get(at) {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            if seen.insert(child) {
                tree.push(child);
            }
        }
        at += 1;
    }
    tree
}

/// The children of `pid`, from `/proc/PID/task/*/children` (the children
/// of each of its threads); `None` where that file is missing (a kernel
/// built without it) or the process is gone.
#[must_use]
pub fn children(pid: u32) -> Option<Vec<u32>> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).ok()?;
        found.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    Some(found)
}

/// `root` and its descendants, following each known process's children
/// files: reads only the tree, cheap enough for every sample. `None` when a
/// children file cannot be read; [`descendants`] then scans all of `/proc`.
#[must_use]
pub fn descendants_by_children(root: u32) -> Option<Vec<u32>> {
    let mut tree = vec![root];
    let mut seen: HashSet<u32> = HashSet::from([root]);
    let mut at = 0;
    while let Some(&pid) = tree.get(at) {
        match children(pid) {
            Some(kids) => {
                for child in kids {
                    if seen.insert(child) {
                        tree.push(child);
                    }
                }
            }
            // The root gone (or no such file): the full scan decides.
            None if pid == root => return None,
            // A child that exited meanwhile has no children to follow.
            None => {}
        }
        at += 1;
    }
    Some(tree)
}

/// Whether `pid` still exists (a zombie counts as gone: it holds nothing).
#[must_use]
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        !matches!(state, Some("Z" | "X") | None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_io_parse() {
        assert_eq!(
            parse_stat_ppid("1234 (python3 (x) y) S 99 1234 1234 0 -1"),
            Some(99)
        );
        assert_eq!(parse_stat_ppid("garbage"), None);
        assert_eq!(
            parse_io_rchar("rchar: 4096\nwchar: 12\nread_bytes: 0\n"),
            Some(4096)
        );
        assert_eq!(parse_io_rchar("wchar: 12\n"), None);
    }

    #[test]
    fn this_process_is_read_and_alive() {
        let me = std::process::id();
        let figures = read_process(me).expect("our own /proc");
        assert!(figures.memory.rss_bytes > 0);
        assert!(is_alive(me));
        assert_eq!(descendants(me).first(), Some(&me));
    }

    #[test]
    fn a_child_is_found_through_the_children_files_as_by_the_full_scan() {
        // A child that waits on its stdin until dropped: alive while looked at.
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("cat starts");
        let me = std::process::id();
        let quick = descendants_by_children(me).expect("children files");
        assert!(quick.contains(&child.id()), "{quick:?}");
        assert!(descendants(me).contains(&child.id()));
        assert_eq!(quick.first(), Some(&me));
        drop(child.stdin.take());
        let _ = child.wait();
        assert!(!children(me).unwrap_or_default().contains(&child.id()));
    }
}
