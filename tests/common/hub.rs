//! A loopback server that answers as the Hub does, for the remote tests:
//! the API's file list, `resolve` answered by a 302 to a storage host (a
//! second port, as the Hub's CDN is another host), range requests, 401 for
//! a private repo without its token, 404, a request it never answers and a
//! body it cuts short. Every request is logged.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The commit every repo is at.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The token a private repo wants.
pub const TOKEN: &str = "hf_testtoken";

/// How a repo behaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Behaviour {
    /// As the Hub.
    Normal,
    /// 401 without `Authorization: Bearer TOKEN` (API and resolve).
    Private,
    /// File bodies stop after half their length.
    Truncated,
    /// File requests are never answered.
    Hangs,
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    /// `hub` or `storage`.
    pub host: &'static str,
    pub path: String,
    pub range: Option<String>,
    pub authorized: bool,
    pub body_bytes: u64,
}

#[derive(Default)]
struct State {
    repos: BTreeMap<String, (PathBuf, Behaviour)>,
    log: Vec<Logged>,
    /// How late every answer comes (a link's round trip).
    delay: std::time::Duration,
    /// Requests received and not yet answered (their answer not started),
    /// and the most at once.
    in_flight: usize,
    peak_in_flight: usize,
}

/// The running server (it stops with the test process).
pub struct Hub {
    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub endpoint: String,
    /// The storage host's origin (where `resolve` sends the client).
    pub storage: String,
    state: Arc<Mutex<State>>,
}

impl Hub {
    pub fn start() -> Self {
        let hub = TcpListener::bind("127.0.0.1:0").expect("bind hub");
        let storage = TcpListener::bind("127.0.0.1:0").expect("bind storage");
        let endpoint = format!("http://{}", hub.local_addr().expect("addr"));
        let storage_origin = format!("http://{}", storage.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State::default()));
        for (listener, host) in [(hub, "hub"), (storage, "storage")] {
            let state = Arc::clone(&state);
            let storage_origin = storage_origin.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let state = Arc::clone(&state);
                    let storage_origin = storage_origin.clone();
                    std::thread::spawn(move || serve(stream, host, &state, &storage_origin));
                }
            });
        }
        Self {
            endpoint,
            storage: storage_origin,
            state,
        }
    }

    /// Serves the files under `dir` as the repo `name` (`ORG/REPO`).
    pub fn add(&self, name: &str, dir: &Path, behaviour: Behaviour) {
        self.lock()
            .repos
            .insert(name.to_owned(), (dir.to_path_buf(), behaviour));
    }

    /// The requests seen so far.
    pub fn log(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }

    /// Forgets the requests seen so far (and the peak of requests at once).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.log.clear();
        state.peak_in_flight = 0;
    }

    /// Answers every request `delay` late from now on, as over a link with
    /// that round trip.
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.lock().delay = delay;
    }

    /// The most requests that were being answered at once since the last
    /// [`Hub::clear`].
    pub fn peak_in_flight(&self) -> usize {
        self.lock().peak_in_flight
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("repo dir")
        .flatten()
        .collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        if entry.path().is_dir() {
            files_under(&entry.path(), &format!("{name}/"), out);
        } else {
            out.push(name);
        }
    }
}

fn not_found(stream: &mut TcpStream, code: &str) -> u64 {
    respond(
        stream,
        "404 Not Found",
        &[("X-Error-Code", code.to_owned())],
        b"not found",
    )
}

fn respond(stream: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) -> u64 {
    use std::fmt::Write as _;
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    if !headers.iter().any(|(k, _)| *k == "Content-Length") {
        let _ = write!(head, "Content-Length: {}\r\n", body.len());
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    body.len() as u64
}

fn serve(mut stream: TcpStream, host: &'static str, state: &Mutex<State>, storage: &str) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut range = None;
    let mut authorized = false;
    let mut any_auth = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        let (k, v) = header.split_once(':').unwrap_or((&header, ""));
        match k.trim().to_ascii_lowercase().as_str() {
            "range" => range = Some(v.trim().to_owned()),
            "authorization" => {
                any_auth = true;
                authorized = v.trim() == format!("Bearer {TOKEN}");
            }
            _ => {}
        }
    }
    let lock = || {
        state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let path_only = path.split('?').next().unwrap_or(&path).to_owned();
    let delay = {
        let mut state = lock();
        state.in_flight += 1;
        state.peak_in_flight = state.peak_in_flight.max(state.in_flight);
        state.delay
    };
    if !delay.is_zero() {
        // The link's round trip, not a wait for anything.
        std::thread::sleep(delay);
    }
    // Counted out before the answer goes: once the client has it, it may
    // ask again at once, before this thread would get here after sending.
    lock().in_flight -= 1;
    let repos = lock().repos.clone();
    let parts: Vec<&str> = path_only.trim_start_matches('/').split('/').collect();
    let sent = if host == "storage" {
        serve_file(&mut stream, &parts, range.as_deref(), &repos, &mut reader)
    } else {
        answer_hub(&mut stream, &parts, authorized, &repos, storage)
    };
    let mut state = lock();
    state.log.push(Logged {
        host,
        path,
        range,
        authorized: any_auth,
        body_bytes: sent,
    });
}

/// The storage host: `/ORG/REPO/path…`, no token needed (the Hub's signed
/// URLs).
fn serve_file(
    stream: &mut TcpStream,
    parts: &[&str],
    range: Option<&str>,
    repos: &BTreeMap<String, (PathBuf, Behaviour)>,
    reader: &mut BufReader<TcpStream>,
) -> u64 {
    use std::os::unix::fs::FileExt as _;
    let repo = parts.iter().take(2).copied().collect::<Vec<_>>().join("/");
    let Some((dir, behaviour)) = repos.get(&repo) else {
        return not_found(stream, "EntryNotFound");
    };
    // Only the range asked for is read (the benchmark's shards are sparse
    // files of gigabytes).
    let Ok(file) = std::fs::File::open(dir.join(parts[2..].join("/"))) else {
        return not_found(stream, "EntryNotFound");
    };
    if *behaviour == Behaviour::Hangs {
        // Never answers: waits for the client to give up and close.
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
        return 0;
    }
    let total = file.metadata().map_or(0, |m| m.len());
    let (status, start, end) = match range
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
    {
        Some((a, b)) => {
            let a: u64 = a.parse().unwrap_or(0);
            let b: u64 = b
                .parse::<u64>()
                .map_or(total.saturating_sub(1), |b| b.min(total.saturating_sub(1)));
            if a >= total {
                return respond(stream, "416 Range Not Satisfiable", &[], b"");
            }
            ("206 Partial Content", a, b + 1)
        }
        None => ("200 OK", 0, total),
    };
    let mut body = vec![0; usize::try_from(end - start).unwrap_or(0)];
    if file.read_exact_at(&mut body, start).is_err() {
        return respond(stream, "500 Internal Server Error", &[], b"");
    }
    let mut headers = vec![("Accept-Ranges", "bytes".to_owned())];
    if status.starts_with("206") {
        headers.push((
            "Content-Range",
            format!("bytes {start}-{}/{total}", end - 1),
        ));
    }
    if *behaviour == Behaviour::Truncated {
        headers.push(("Content-Length", body.len().to_string()));
        return respond(stream, status, &headers, &body[..body.len() / 2]);
    }
    respond(stream, status, &headers, &body)
}

/// The Hub's API and `resolve` addresses.
fn answer_hub(
    stream: &mut TcpStream,
    parts: &[&str],
    authorized: bool,
    repos: &BTreeMap<String, (PathBuf, Behaviour)>,
    storage: &str,
) -> u64 {
    // The Hub: /api/models/ORG/REPO[/revision/REV] and /ORG/REPO/resolve/REV/PATH.
    let (repo, rest): (String, &[&str]) = if parts.first() == Some(&"api") {
        (
            parts.get(2..4).map(|p| p.join("/")).unwrap_or_default(),
            &[],
        )
    } else {
        (
            parts.iter().take(2).copied().collect::<Vec<_>>().join("/"),
            &parts[2.min(parts.len())..],
        )
    };
    let Some((dir, behaviour)) = repos.get(&repo) else {
        return not_found(stream, "RepoNotFound");
    };
    if *behaviour == Behaviour::Private && !authorized {
        return respond(
            stream,
            "401 Unauthorized",
            &[("X-Error-Code", "RepoNotFound".into())],
            b"",
        );
    }
    if parts.first() == Some(&"api") {
        let mut files = Vec::new();
        files_under(dir, "", &mut files);
        let siblings: Vec<_> = files
            .iter()
            .map(|f| serde_json::json!({"rfilename": f}))
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({
            "id": repo, "sha": COMMIT, "siblings": siblings,
        }))
        .expect("json");
        return respond(
            stream,
            "200 OK",
            &[("Content-Type", "application/json".into())],
            &body,
        );
    }
    match rest {
        ["resolve", _rev, file @ ..] if dir.join(file.join("/")).is_file() => respond(
            stream,
            "302 Found",
            &[
                ("Location", format!("{storage}/{repo}/{}", file.join("/"))),
                ("X-Repo-Commit", COMMIT.into()),
            ],
            b"",
        ),
        _ => not_found(stream, "EntryNotFound"),
    }
}
