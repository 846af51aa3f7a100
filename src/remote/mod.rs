//! Checkpoints that are not on this machine: Hub repos and file URLs, read
//! by range requests as the Hub's own viewer reads them. See
//! `docs/remote.md`.
//!
//! [`Remote::connect`] asks the Hub for the repo's commit and file list
//! (one request); headers, the index and `config.json` then come through
//! [`Remote::header_into`] and [`Remote::whole`], from the on-disk
//! [`cache`] when this commit was read before; tensor bytes through
//! [`Remote::read_at`]. [`open_checkpoint`] builds a `Checkpoint` from
//! them (this layer sits above the checkpoint layer, which reads a remote
//! checkpoint's tensor bytes through the `ByteSource` that `Remote` is).

pub mod cache;
mod checkpoint;
pub mod http;
pub mod location;

use std::ops::Range;

pub use http::{Client, Counters, Fetched, HttpError};
pub use location::{Location, LocationError, RepoKind, RepoPath, endpoint_from_env, is_address};

/// A remote file read from its start, for a parser that reads a header
/// of unknown length: each read past what was fetched fetches the next
/// range (growing, up to 16 MiB a request). Every byte fetched is kept.
#[derive(Debug)]
pub struct RangeReader<'a> {
    remote: &'a Remote,
    url: String,
    /// Bytes `0..bytes.len()` of the file.
    bytes: Vec<u8>,
    pos: u64,
    total: Option<u64>,
    next: u64,
    cap: u64,
    /// The request that failed (the parser sees an I/O error).
    failed: Option<HttpError>,
}

impl std::io::Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let have = self.bytes.len() as u64;
        let want_end = self.pos.saturating_add(buf.len() as u64);
        if want_end > have && self.total.is_none_or(|t| have < t) {
            if want_end > self.cap {
                let cap = self.cap;
                self.failed = Some(HttpError::from_text(&format!(
                    "the header is longer than the {cap}-byte limit"
                )));
                return Err(std::io::Error::other("header too long"));
            }
            let mut end = want_end.max(have + self.next).min(self.cap);
            if let Some(total) = self.total {
                end = end.min(total);
            }
            match self
                .remote
                .client
                .get(&self.url, Some(&(have..end)), end - have)
            {
                Ok(piece) => {
                    self.total = self.total.or(piece.total);
                    self.bytes.extend_from_slice(&piece.body);
                    self.next = (self.next * 2).min(16 << 20);
                }
                Err(err) => {
                    self.failed = Some(err);
                    return Err(std::io::Error::other("request failed"));
                }
            }
        }
        let start = usize::try_from(self.pos)
            .unwrap_or(usize::MAX)
            .min(self.bytes.len());
        let n = buf.len().min(self.bytes.len() - start);
        buf[..n].copy_from_slice(&self.bytes[start..start + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for RangeReader<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.pos = crate::checkpoint::pytorch::sought(self.pos, self.total, to)?;
        Ok(self.pos)
    }
}

/// A file of a remote checkpoint as a torch reader's source: its size from
/// the first range request, its bytes by range requests.
pub(crate) struct RemoteFile<'a> {
    remote: &'a Remote,
    file: &'a str,
    size: std::sync::OnceLock<u64>,
}

impl<'a> RemoteFile<'a> {
    pub(crate) fn new(remote: &'a Remote, file: &'a str) -> Self {
        Self {
            remote,
            file,
            size: std::sync::OnceLock::new(),
        }
    }
}

impl crate::checkpoint::pytorch::Source for RemoteFile<'_> {
    fn size(&self) -> std::io::Result<u64> {
        if let Some(size) = self.size.get() {
            return Ok(*size);
        }
        let first = self
            .remote
            .client
            .get(&self.remote.url(self.file), Some(&(0..1)), 1)
            .map_err(|e| std::io::Error::other(e.message))?;
        let size = first
            .total
            .ok_or_else(|| std::io::Error::other("the server did not say the file's size"))?;
        Ok(*self.size.get_or_init(|| size))
    }

    fn read_at(&self, range: Range<u64>) -> std::io::Result<Vec<u8>> {
        let end = range.end.min(self.size()?);
        if range.start >= end {
            return Ok(Vec::new());
        }
        self.remote
            .read_at(self.file, range.start..end)
            .map_err(|e| std::io::Error::other(e.message))
    }
}

/// Bytes asked for first from each shard: a header longer than this costs
/// a second request (the Hub's viewer reads the same amount).
pub const FIRST_READ_BYTES: u64 = 100_000;
/// The API's answer about a repo is refused past this size.
const MAX_API_BYTES: u64 = 64 << 20;
/// Bytes per request when a tensor is read (each retried on its own).
const READ_PIECE_BYTES: u64 = 64 << 20;

/// A remote checkpoint's files and how to reach them.
#[derive(Debug)]
pub struct Remote {
    client: Client,
    location: Location,
    /// The commit the files are read at (Hub repos), as the API said.
    commit: Option<String>,
    /// Every file of the repo (Hub repos), as the API listed them.
    files: Vec<String>,
    /// The folder in the repo that file names are read in.
    folder: String,
    cache: Option<cache::CommitCache>,
}

/// The API's answer about a repo revision (what is used of it).
#[derive(serde::Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

/// `folder/name` in a repo, or `name` at its top.
#[must_use]
pub fn in_folder(folder: &str, name: &str) -> String {
    if folder.is_empty() {
        name.to_owned()
    } else {
        format!("{folder}/{name}")
    }
}

/// Bytes a URL's path segment keeps: RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` with everything but unreserved characters as `%XX` (one path
/// segment of a URL).
fn encode_segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, SEGMENT).to_string()
}

/// A repo path with each segment encoded.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}

impl Remote {
    /// Connects to `location`: for a Hub repo, one request to the API for
    /// its commit and file list; for a URL, nothing yet.
    ///
    /// # Errors
    /// The API's refusal or a network failure, in one line.
    pub fn connect(location: Location) -> Result<Self, HttpError> {
        let endpoint = match &location {
            Location::Hub(repo) => repo.endpoint.clone(),
            Location::Url(_) => endpoint_from_env(),
        };
        let client = Client::for_hub(&endpoint);
        let mut remote = Self {
            client,
            location,
            commit: None,
            files: Vec::new(),
            folder: String::new(),
            cache: None,
        };
        if let Location::Hub(repo) = &remote.location {
            let mut url = format!("{}/api/{}/{}", repo.endpoint, repo.kind.api(), repo.repo);
            if let Some(rev) = &repo.revision {
                url.push_str("/revision/");
                url.push_str(&encode_segment(rev));
            }
            let key = format!("{}\n{}\n{}", repo.endpoint, repo.kind.api(), repo.repo);
            let revision = repo.revision.as_deref().unwrap_or("main");
            // Offline: the answer kept when the repo was last opened online.
            let offline = http::offline();
            let body = if offline {
                cache::kept_answer(&key, revision, MAX_API_BYTES).ok_or_else(|| {
                    HttpError::from_text(&format!(
                        "HF_HUB_OFFLINE is set and {} at {revision} was never opened online here: weightscope's cache has no answer of the Hub for it",
                        repo.repo
                    ))
                })?
            } else {
                remote.client.get(&url, None, MAX_API_BYTES)?.body
            };
            let info: RepoInfo = serde_json::from_slice(&body).map_err(|e| {
                HttpError::from_text(&format!(
                    "the Hub's answer about the repo is not what its API gives ({e})"
                ))
            })?;
            if !offline {
                cache::keep_answer(&key, revision, &body);
            }
            remote.cache = info
                .sha
                .as_deref()
                .and_then(|sha| cache::CommitCache::new(&key, sha));
            remote.commit = info.sha;
            remote.files = info.siblings.into_iter().map(|s| s.rfilename).collect();
        }
        Ok(remote)
    }

    /// Where the checkpoint is, as the user named it.
    #[must_use]
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The commit the files are read at (Hub repos).
    #[must_use]
    pub fn commit(&self) -> Option<&str> {
        self.commit.as_deref()
    }

    /// Every file of the repo (empty for a URL).
    #[must_use]
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// Requests made and bytes received so far.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        self.client.counters()
    }

    /// Names the folder in the repo that the file names given to
    /// [`Remote::url`], [`Remote::whole`], [`Remote::header_into`] and
    /// [`Remote::read_at`] are in (the checkpoint's folder).
    pub fn set_folder(&mut self, folder: &str) {
        folder.clone_into(&mut self.folder);
    }

    /// The address of `file` (a name in the folder, see
    /// [`Remote::set_folder`]; ignored for a URL).
    #[must_use]
    pub fn url(&self, file: &str) -> String {
        match &self.location {
            Location::Url(url) => url.clone(),
            Location::Hub(repo) => {
                let rev = self
                    .commit
                    .as_deref()
                    .or(repo.revision.as_deref())
                    .unwrap_or("main");
                format!(
                    "{}/{}{}/resolve/{}/{}",
                    repo.endpoint,
                    repo.kind.url_prefix(),
                    repo.repo,
                    encode_segment(rev),
                    encode_path(&self.in_folder(file))
                )
            }
        }
    }

    fn in_folder(&self, file: &str) -> String {
        in_folder(&self.folder, file)
    }

    /// A whole small file (the index, `config.json`), at most `cap` bytes;
    /// from the cache when this commit's copy was kept.
    ///
    /// # Errors
    /// The request's failure.
    pub fn whole(&self, file: &str, cap: u64) -> Result<Vec<u8>, HttpError> {
        if let Some((_, bytes)) = self
            .cache
            .as_ref()
            .and_then(|c| c.get("whole", &self.in_folder(file)))
        {
            return Ok(bytes);
        }
        let fetched = self.client.get(&self.url(file), None, cap)?;
        if let Some(c) = &self.cache {
            c.put(
                "whole",
                &self.in_folder(file),
                fetched.body.len() as u64,
                &fetched.body,
            );
        }
        Ok(fetched.body)
    }

    /// The first bytes of a safetensors file up to the end of its header
    /// (`8 + N`, or what there is when the file is shorter or its length
    /// prefix is out of bounds: the parser says what is wrong), and the
    /// file's size. One range request, a second when the header is longer
    /// than [`FIRST_READ_BYTES`]; none when the cache has it. Read into
    /// `buf` (its memory reused: a 163-shard repo reads 16 MB of headers
    /// from the cache): the file's size, and where in `buf` the header
    /// starts.
    ///
    /// # Errors
    /// A request's failure, or a server that does not say the file's size.
    pub fn header_into(
        &self,
        file: &str,
        cap: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(u64, usize), HttpError> {
        if let Some(size) = self
            .cache
            .as_ref()
            .and_then(|c| c.get_into("header", &self.in_folder(file), buf))
        {
            return Ok((size, 8));
        }
        let (size, fetched) = self.fetch_header(file, cap)?;
        *buf = fetched;
        Ok((size, 0))
    }

    /// The cache's copy of a whole small file (see [`Remote::whole`]), to
    /// read a piece at a time (an 8 MB index); `None` when it is not kept.
    #[must_use]
    pub fn whole_kept(&self, file: &str) -> Option<std::fs::File> {
        let (_, opened) = self.cache.as_ref()?.open("whole", &self.in_folder(file))?;
        Some(opened)
    }

    /// Whether the cache holds `file`'s header (a read of it asks nothing).
    #[must_use]
    pub fn has_header(&self, file: &str) -> bool {
        self.cache
            .as_ref()
            .is_some_and(|c| c.has("header", &self.in_folder(file)))
    }

    /// A safetensors header fetched (see [`Remote::header_into`]) and kept
    /// in the cache.
    fn fetch_header(&self, file: &str, cap: u64) -> Result<(u64, Vec<u8>), HttpError> {
        let url = self.url(file);
        let first = self
            .client
            .get(&url, Some(&(0..FIRST_READ_BYTES)), FIRST_READ_BYTES)?;
        let size = first
            .total
            .ok_or_else(|| HttpError::from_text("the server did not say the file's size"))?;
        let mut bytes = first.body;
        if let Some(prefix) = bytes.first_chunk::<8>() {
            let want = u64::from_le_bytes(*prefix).saturating_add(8);
            if want <= size && want <= cap.saturating_add(8) && want > bytes.len() as u64 {
                let rest = self
                    .client
                    .get(&url, Some(&(bytes.len() as u64..want)), want)?;
                bytes.extend_from_slice(&rest.body);
            } else if want <= bytes.len() as u64 {
                bytes.truncate(usize::try_from(want).unwrap_or(bytes.len()));
            }
        }
        if let Some(c) = &self.cache {
            c.put("header", &self.in_folder(file), size, &bytes);
        }
        Ok((size, bytes))
    }

    /// Reads the start of `file` (a GGUF header, whose length is known only
    /// by reading it) with `parse`, given a reader that fetches ranges as
    /// it goes (100 KB, then twice as much each time) and stops at
    /// `cap` bytes; the bytes read are kept in the cache, so a second open
    /// of this commit fetches nothing. Returns the file's size and what
    /// `parse` made.
    ///
    /// # Errors
    /// A request's failure, or `parse`'s error, in one line.
    pub fn prefix_with<T, E: std::fmt::Display>(
        &self,
        file: &str,
        cap: u64,
        parse: impl FnOnce(&mut RangeReader<'_>) -> Result<T, E>,
    ) -> Result<(u64, T), PrefixError<E>> {
        let kept = self
            .cache
            .as_ref()
            .and_then(|c| c.get("prefix", &self.in_folder(file)));
        let from_cache = kept.is_some();
        let (total, bytes) = kept.map_or((None, Vec::new()), |(size, bytes)| (Some(size), bytes));
        let mut reader = RangeReader {
            remote: self,
            url: self.url(file),
            bytes,
            pos: 0,
            total,
            next: FIRST_READ_BYTES,
            cap,
            failed: None,
        };
        let parsed = parse(&mut reader);
        if let Some(err) = reader.failed.take() {
            return Err(PrefixError::Request(err));
        }
        let parsed = parsed.map_err(PrefixError::Parse)?;
        let total = reader.total.ok_or(PrefixError::NoSize)?;
        if !from_cache && let Some(c) = &self.cache {
            c.put("prefix", &self.in_folder(file), total, &reader.bytes);
        }
        Ok((total, parsed))
    }

    /// The bytes `range` of `file`, a piece at a time.
    ///
    /// # Errors
    /// A request's failure.
    pub fn read_at(&self, file: &str, range: Range<u64>) -> Result<Vec<u8>, HttpError> {
        let url = self.url(file);
        let mut bytes = Vec::with_capacity(usize::try_from(range.end - range.start).unwrap_or(0));
        let mut at = range.start;
        while at < range.end {
            let end = (at + READ_PIECE_BYTES).min(range.end);
            let piece = self.client.get(&url, Some(&(at..end)), end - at)?;
            if piece.body.is_empty() {
                return Err(HttpError::from_text("the file ends before the tensor does"));
            }
            at += piece.body.len() as u64;
            bytes.extend_from_slice(&piece.body);
        }
        Ok(bytes)
    }

    /// Keeps the on-disk cache under its cap (after an open has written).
    pub fn trim_cache(&self) {
        if self.cache.is_some() {
            cache::trim(cache::CAP_BYTES);
        }
    }
}

impl crate::checkpoint::ByteSource for Remote {
    fn read_at(
        &self,
        file: &str,
        range: Range<u64>,
    ) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
        Remote::read_at(self, file, range).map_err(Into::into)
    }

    fn commit(&self) -> Option<&str> {
        Remote::commit(self)
    }
}

/// Opens the checkpoint at `path`, on this machine or (an address: a Hub
/// repo or a URL, see `docs/remote.md`) through range requests, calling
/// `report(parsed, total)` as shard headers are parsed.
///
/// # Errors
/// As [`crate::checkpoint::Checkpoint::open`]; for an address, the request
/// that failed, in one line naming it.
pub fn open_checkpoint(
    path: &std::path::Path,
    report: &(dyn Fn(usize, usize) + Sync),
) -> Result<crate::checkpoint::Checkpoint, crate::checkpoint::CheckpointError> {
    use crate::checkpoint::{Checkpoint, CheckpointError};
    if let Some(text) = path.to_str()
        && let Some(location) = Location::parse(text, &endpoint_from_env())
    {
        let location = location.map_err(|reason| CheckpointError::Unreadable {
            path: std::path::PathBuf::from(crate::units::location_data(text)),
            reason: reason.to_string(),
        })?;
        return Checkpoint::open_remote(location, report);
    }
    Checkpoint::open_reporting(path, report)
}

/// Why [`Remote::prefix_with`] gave no result.
#[derive(Debug, thiserror::Error)]
pub enum PrefixError<E: std::fmt::Display> {
    /// A request failed (the reader stopped there).
    #[error("{}", .0.message)]
    Request(HttpError),
    /// The bytes read did not parse.
    #[error("{0}")]
    Parse(E),
    /// The server never said how long the file is.
    #[error("the server did not say the file's size")]
    NoSize,
}
