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
    Some(ProcessReading { memory, read_bytes })
}

/// The `.safetensors` files among `pid`'s open descriptors (every one of
/// them read: see [`FdScans`] for how often).
#[must_use]
pub fn open_safetensors(pid: u32) -> Vec<PathBuf> {
    let mut open_files = Vec::new();
    crate::files::each_link_target(Path::new(&format!("/proc/{pid}/fd")), |target| {
        if is_safetensors(target) {
            open_files.push(target.to_path_buf());
        }
    });
    open_files.sort();
    open_files.dedup();
    open_files
}

/// Each process's descriptor table, read at most as often as keeps the
/// reading under a twentieth of the time since the last: a job with a few
/// descriptors is read every sample; one with 100,000 (a table that takes
/// the better part of a second to list and read) every few seconds, its
/// last answer used between, so the sampler keeps its interval.
#[derive(Debug, Default)]
pub struct FdScans {
    by_pid: HashMap<u32, FdScan>,
}

#[derive(Debug)]
struct FdScan {
    at: std::time::Instant,
    cost: std::time::Duration,
    files: Vec<PathBuf>,
}

impl FdScans {
    /// `pid`'s open `.safetensors` files at `now`: read again, or the last
    /// reading while reading again would cost more than a twentieth.
    pub fn open_files(&mut self, pid: u32, now: std::time::Instant) -> Vec<PathBuf> {
        if let Some(last) = self.by_pid.get(&pid)
            && now.saturating_duration_since(last.at) < last.cost * 19
        {
            return last.files.clone();
        }
        let started = std::time::Instant::now();
        let files = open_safetensors(pid);
        self.by_pid.insert(
            pid,
            FdScan {
                at: now,
                cost: started.elapsed(),
                files: files.clone(),
            },
        );
        files
    }

    /// Forgets the processes not in `alive`.
    pub fn retain(&mut self, alive: &HashSet<u32>) {
        self.by_pid.retain(|pid, _| alive.contains(pid));
    }
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
    number_after(text, "rchar:")
}

/// The number after `name` at the start of a line of `text` (the kernel's
/// `name: value` and `name value` files).
fn number_after(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
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
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(text) => found.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            ),
            // A thread that ended since the listing has nothing to follow
            // (a test binary's threads come and go while it is read).
            Err(_) if !task.path().exists() => {}
            Err(_) => return None,
        }
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

/// A memory cgroup a process is in: its name and folder, its limit, and
/// how many processes the kernel's OOM killer has killed in it so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCgroup {
    /// Its name (`/x/y`), as `/proc/PID/cgroup` gives it.
    pub name: String,
    /// Its folder under `/sys/fs/cgroup`.
    pub dir: PathBuf,
    /// Its memory limit (none: unlimited).
    pub limit_bytes: Option<u64>,
    /// `oom_kill` of `memory.oom_control` (v1) or `memory.events` (v2).
    pub oom_kills: Option<u64>,
}

/// The memory cgroup of `pid` (cgroup v1's memory controller, else the v2
/// hierarchy), with its limit and OOM kill count; `None` when it cannot be
/// read (gone, not Linux, no cgroup file system).
#[must_use]
pub fn memory_cgroup(pid: u32) -> Option<MemoryCgroup> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let (name, v1) = parse_memory_cgroup(&text)?;
    let root = Path::new("/sys/fs/cgroup");
    let relative = name.trim_start_matches('/');
    let dir = if v1 {
        root.join("memory").join(relative)
    } else {
        root.join(relative)
    };
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
    let (limit, events) = if v1 {
        (read("memory.limit_in_bytes"), read("memory.oom_control"))
    } else {
        (read("memory.max"), read("memory.events"))
    };
    Some(MemoryCgroup {
        limit_bytes: limit.as_deref().and_then(parse_limit),
        oom_kills: events.as_deref().and_then(parse_oom_kills),
        name,
        dir,
    })
}

/// The memory cgroup's name in a `/proc/PID/cgroup` text, and whether it
/// is cgroup v1's memory controller (else the v2 unified hierarchy).
#[must_use]
pub fn parse_memory_cgroup(text: &str) -> Option<(String, bool)> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            return Some((path.to_owned(), true));
        }
        if controllers.is_empty() {
            unified = Some(path.to_owned());
        }
    }
    unified.map(|path| (path, false))
}

/// A memory limit file's value: bytes, or `None` for "max" or v1's
/// "unlimited" (a number near 2^63).
#[must_use]
pub fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok().filter(|&b| b < 1 << 60)
}

/// The `oom_kill` count in `memory.oom_control` or `memory.events`.
#[must_use]
pub fn parse_oom_kills(text: &str) -> Option<u64> {
    number_after(text, "oom_kill ")
}

/// Resident bytes of each file `pid` maps, from `/proc/PID/smaps` (the
/// binary, its libraries, mapped safetensors, fonts): `(path, bytes)`.
#[must_use]
pub fn mapped_files(pid: u32) -> Vec<(String, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .map(|text| parse_smaps_files(&text))
        .unwrap_or_default()
}

/// The resident bytes by mapped file in a `/proc/PID/smaps` text, largest
/// first (anonymous and special mappings, `[heap]` and the like, left out).
#[must_use]
pub fn parse_smaps_files(text: &str) -> Vec<(String, u64)> {
    let mut by_file: HashMap<String, u64> = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        // A mapping's header starts with its address range "a-b".
        if first.contains('-') && !first.ends_with(':') {
            current = line
                .split_whitespace()
                .nth(5)
                .filter(|p| p.starts_with('/'))
                .map(|_| {
                    // The path is everything after the fifth field (it may hold spaces).
                    let mut rest = line;
                    for _ in 0..5 {
                        rest = rest.trim_start();
                        rest = rest.find(char::is_whitespace).map_or("", |i| &rest[i..]);
                    }
                    rest.trim().to_owned()
                });
            continue;
        }
        if let (Some(path), Some(kib)) = (&current, line.strip_prefix("Rss:")) {
            let bytes = kib
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024;
            if bytes > 0 {
                *by_file.entry(path.clone()).or_insert(0) += bytes;
            }
        }
    }
    let mut files: Vec<(String, u64)> = by_file.into_iter().collect();
    files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    files
}

/// The OOM kill count of the memory cgroup in folder `dir` (v1 or v2).
#[must_use]
pub fn oom_kills_in(dir: &Path) -> Option<u64> {
    ["memory.oom_control", "memory.events"]
        .iter()
        .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .as_deref()
        .and_then(parse_oom_kills)
}

/// The address-space limit of `pid` (`ulimit -v`), when it has one.
#[must_use]
pub fn address_space_limit(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    parse_address_space_limit(&text)
}

/// The soft "Max address space" of a `/proc/PID/limits` text, in bytes.
#[must_use]
pub fn parse_address_space_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    let soft = line["Max address space".len()..]
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smaps_gives_resident_bytes_by_file() {
        let text = "7f00-7f10 r--p 00000000 08:01 123 /usr/lib/libmlx.so\n\
                    Size: 64 kB\nRss: 40 kB\n\
                    7f10-7f20 r-xp 00010000 08:01 123 /usr/lib/libmlx.so\n\
                    Rss: 24 kB\n\
                    7f20-7f30 rw-p 00000000 00:00 0 \n\
                    Rss: 1000 kB\n\
                    7f30-7f40 r--s 00000000 08:01 9 /m/model 00001.safetensors\n\
                    Rss: 8 kB\n\
                    7f40-7f50 rw-p 00000000 00:00 0 [heap]\nRss: 500 kB\n";
        assert_eq!(
            parse_smaps_files(text),
            [
                ("/usr/lib/libmlx.so".to_owned(), 64 * 1024),
                ("/m/model 00001.safetensors".to_owned(), 8 * 1024),
            ]
        );
        assert!(
            !mapped_files(std::process::id()).is_empty(),
            "this test's binary"
        );
    }

    #[test]
    fn cgroups_limits_and_oom_kills_parse() {
        let v1 = "9:name=systemd:/\n4:memory:/jobs/fold\n0::/\n";
        assert_eq!(parse_memory_cgroup(v1), Some(("/jobs/fold".into(), true)));
        assert_eq!(
            parse_memory_cgroup("0::/user.slice/x\n"),
            Some(("/user.slice/x".into(), false))
        );
        assert_eq!(parse_memory_cgroup("junk"), None);
        assert_eq!(parse_limit("734003200\n"), Some(734_003_200));
        assert_eq!(parse_limit("9223372036854771712\n"), None, "v1's unlimited");
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(
            parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
            Some(2)
        );
        assert_eq!(
            parse_oom_kills("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
            Some(1)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         1073741824           unlimited            bytes\n";
        assert_eq!(parse_address_space_limit(limits), Some(1 << 30));
        assert_eq!(
            parse_address_space_limit(
                "Max address space         unlimited            unlimited            bytes\n"
            ),
            None
        );
        // This process: some cgroup or none, never a panic.
        let _ = memory_cgroup(std::process::id());
    }

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
