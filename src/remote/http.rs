//! Range requests over HTTP(S) through one small blocking client (ureq over
//! rustls): time-outs, retries with back-off, redirects followed by hand so
//! the `Range` header goes along and a token never leaves the Hub's host,
//! and one-line errors that say what to do.

use std::io::Read as _;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The first wait before a retry; each next one doubles.
const BACKOFF: Duration = Duration::from_millis(250);
/// Redirects followed per request (the Hub answers `resolve` with one).
const MAX_HOPS: usize = 5;
/// The slowest transfer a request's deadline allows for its bytes.
const SLOWEST_BYTES_PER_SEC: u64 = 256 << 10;

/// A request that failed, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HttpError {
    /// The HTTP status, when the server answered.
    pub status: Option<u16>,
    /// What went wrong and, where it helps, what to do.
    pub message: String,
    retry: bool,
}

impl HttpError {
    /// An error that is not the server's status and will not pass on a retry.
    #[must_use]
    pub fn from_text(message: &str) -> Self {
        Self::new(None, message, false)
    }

    fn new(status: Option<u16>, message: impl Into<String>, retry: bool) -> Self {
        Self {
            status,
            message: message.into(),
            retry,
        }
    }
}

/// What the headers of a 200 or 206 answer said.
struct Answer {
    status: u16,
    content_range: Option<String>,
    length: Option<u64>,
}

/// A response body and what the headers said about the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The bytes asked for (fewer at the end of the file).
    pub body: Vec<u8>,
    /// The whole file's size (`Content-Range`'s total, else the length of
    /// a whole-file answer).
    pub total: Option<u64>,
}

/// Requests made and body bytes received, for progress and the tests.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    /// Requests sent (each redirect hop and each retry counts).
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Body bytes received.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The HTTP client: one connection pool, the Hub's token for the Hub's
/// host only.
#[derive(Debug)]
pub struct Client {
    agent: ureq::Agent,
    token: Option<String>,
    /// `scheme://host[:port]` the token may be sent to.
    token_origin: String,
    timeout: Duration,
    retries: u32,
    counters: Counters,
    /// `HF_HUB_OFFLINE` is set: every request is refused (see [`offline`]).
    offline: bool,
}

/// Whether `HF_HUB_OFFLINE` asks for no network at all, read as
/// `huggingface_hub` reads it (`1`, `ON`, `YES`, `TRUE`, any case): opens
/// then use what weightscope's cache kept and request nothing.
#[must_use]
pub fn offline() -> bool {
    crate::environment::get()
        .outside
        .hf_hub_offline
        .as_ref()
        .is_some_and(|v| {
            ["1", "ON", "YES", "TRUE"]
                .iter()
                .any(|t| v.eq_ignore_ascii_case(t))
        })
}

impl Client {
    /// A client for the Hub at `endpoint`, with the token from the
    /// environment or `huggingface_hub`'s token file (see [`hub_token`]).
    #[must_use]
    pub fn for_hub(endpoint: &str) -> Self {
        let environment = crate::environment::get();
        let timeout = environment.http_timeout;
        let retries = environment.http_retries;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .timeout_per_read(Some(timeout))
            .user_agent(concat!("weightscope/", env!("CARGO_PKG_VERSION")))
            // A connection kept for each header fetch in flight (ureq keeps
            // 3 a host by default: the others would reconnect every time).
            .max_idle_connections(2 * super::checkpoint::PARALLEL_FETCHES)
            .max_idle_connections_per_host(super::checkpoint::PARALLEL_FETCHES)
            .build()
            .new_agent();
        Self {
            agent,
            token: hub_token(),
            token_origin: origin(endpoint).to_ascii_lowercase(),
            timeout,
            retries,
            counters: Counters::default(),
            offline: offline(),
        }
    }

    /// Whether a token will be sent to the Hub.
    #[must_use]
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Requests made and bytes received so far.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// GETs `url`: the bytes in `range` (a range request), or the whole
    /// body when `range` is `None` (refused past `cap` bytes). Retries what
    /// may pass, waiting longer each time.
    ///
    /// # Errors
    /// The last attempt's [`HttpError`].
    pub fn get(
        &self,
        url: &str,
        range: Option<&Range<u64>>,
        cap: u64,
    ) -> Result<Fetched, HttpError> {
        if self.offline {
            return Err(HttpError::from_text(&format!(
                "HF_HUB_OFFLINE is set and {url} is not in weightscope's cache (opened online once, a repo's headers are kept; tensor values are not)"
            )));
        }
        let mut wait = BACKOFF;
        let mut tries = 0;
        loop {
            match self.attempt(url, range, cap) {
                Err(err) if err.retry && tries < self.retries => {
                    tries += 1;
                    std::thread::sleep(wait);
                    // Doubling, to at most 8 s a wait.
                    wait = (wait * 2).min(Duration::from_secs(8));
                }
                other => return other,
            }
        }
    }

    fn attempt(
        &self,
        url: &str,
        range: Option<&Range<u64>>,
        cap: u64,
    ) -> Result<Fetched, HttpError> {
        let deadline = std::time::Instant::now() + self.budget(range, cap);
        let result = self.attempt_until(url, range, cap, deadline);
        // Whatever failed, past the deadline the deadline is what to say.
        match result {
            Err(_) if std::time::Instant::now() >= deadline => Err(self.late(range, cap)),
            other => other,
        }
    }

    /// The most one request (its redirects and its body included) may
    /// take: twice the silence allowed, plus the bytes asked for at
    /// [`SLOWEST_BYTES_PER_SEC`]. A server that sends a byte a second is
    /// never silent long enough for the time-out, but it meets this.
    fn budget(&self, range: Option<&Range<u64>>, cap: u64) -> Duration {
        let want = range.map_or(cap, |r| r.end.saturating_sub(r.start));
        self.timeout
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(want / SLOWEST_BYTES_PER_SEC))
    }

    fn late(&self, range: Option<&Range<u64>>, cap: u64) -> HttpError {
        HttpError::new(
            None,
            format!(
                "the answer did not arrive within its deadline of {} s (WEIGHTSCOPE_HTTP_TIMEOUT {} s, twice, plus {} bytes at 256 KiB/s)",
                self.budget(range, cap).as_secs(),
                self.timeout.as_secs(),
                range.map_or(cap, |r| r.end.saturating_sub(r.start)),
            ),
            false,
        )
    }

    fn attempt_until(
        &self,
        url: &str,
        range: Option<&Range<u64>>,
        cap: u64,
        deadline: std::time::Instant,
    ) -> Result<Fetched, HttpError> {
        let mut current = url.to_owned();
        for _ in 0..=MAX_HOPS {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(self.late(range, cap));
            }
            let mut request = self
                .agent
                .get(&current)
                .config()
                .timeout_global(Some(left))
                .build();
            if let Some(r) = range {
                request = request.header(
                    "Range",
                    format!("bytes={}-{}", r.start, r.end.saturating_sub(1)),
                );
            }
            if let Some(token) = &self.token
                && origin(&current).eq_ignore_ascii_case(&self.token_origin)
            {
                request = request.header("Authorization", format!("Bearer {token}"));
            }
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let mut response = request.call().map_err(|e| self.transport(&e))?;
            let status = response.status().as_u16();
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let Some(to) = header("location") else {
                    return Err(HttpError::new(
                        Some(status),
                        format!("HTTP {status} without a Location"),
                        false,
                    ));
                };
                current = join(&current, &to);
                continue;
            }
            if !matches!(status, 200 | 206) {
                return Err(status_error(
                    status,
                    header("x-error-code").as_deref(),
                    self.has_token(),
                ));
            }
            let answer = Answer {
                status,
                content_range: header("content-range"),
                length: header("content-length").and_then(|v| v.trim().parse::<u64>().ok()),
            };
            return self.read_answer(&answer, response.body_mut().as_reader(), range, cap);
        }
        Err(HttpError::new(
            None,
            format!("more than {MAX_HOPS} redirects"),
            false,
        ))
    }

    /// The body of a 200 or 206 answer to a request for `range` (or the
    /// whole file, at most `cap` bytes).
    fn read_answer(
        &self,
        answer: &Answer,
        reader: impl std::io::Read,
        range: Option<&Range<u64>>,
        cap: u64,
    ) -> Result<Fetched, HttpError> {
        let status = answer.status;
        let too_large = || {
            HttpError::new(
                Some(status),
                format!("the answer is larger than the {cap}-byte limit"),
                false,
            )
        };
        match (status, range) {
            (206, Some(asked)) => {
                let (start, end, total) = answer
                    .content_range
                    .as_deref()
                    .and_then(parse_content_range)
                    .ok_or_else(|| {
                        HttpError::new(
                            Some(206),
                            "a partial answer without a usable Content-Range",
                            false,
                        )
                    })?;
                if start != asked.start || end < start {
                    return Err(HttpError::new(
                        Some(206),
                        format!("asked for bytes from {} and got {start}-{end}", asked.start),
                        false,
                    ));
                }
                // What was asked for and no more, whatever the server
                // claims to send (a Content-Range of 100 GB for a 100 KB
                // request is read as 100 KB).
                let last = end.min(asked.end.saturating_sub(1));
                let body = self.read_body(reader, last.saturating_add(1).saturating_sub(start))?;
                Ok(Fetched { body, total })
            }
            (_, Some(asked)) if asked.start > 0 => Err(HttpError::new(
                Some(status),
                "the server ignores Range requests (it sent the whole file)",
                false,
            )),
            (_, Some(asked)) => {
                // A whole-file answer to a range from 0: keep what was
                // asked for and drop the connection.
                if let Some(length) = answer.length {
                    let body = self.read_body(reader, length.min(asked.end))?;
                    return Ok(Fetched {
                        body,
                        total: Some(length),
                    });
                }
                // Without a length (chunked): a body that ends before what
                // was asked for is the whole file.
                let mut body = Vec::new();
                let read = reader.take(asked.end).read_to_end(&mut body);
                let got = body.len() as u64;
                self.counters.bytes.fetch_add(got, Ordering::Relaxed);
                read.map_err(|e| self.body_error(&e, got, None))?;
                Ok(Fetched {
                    body,
                    total: (got < asked.end).then_some(got),
                })
            }
            (_, None) => {
                if answer.length.is_some_and(|n| n > cap) {
                    return Err(too_large());
                }
                let mut body = Vec::new();
                let read = reader.take(cap + 1).read_to_end(&mut body);
                let got = body.len() as u64;
                self.counters.bytes.fetch_add(got, Ordering::Relaxed);
                read.map_err(|e| self.body_error(&e, got, answer.length))?;
                if got > cap {
                    return Err(too_large());
                }
                if let Some(length) = answer.length.filter(|&n| n != got) {
                    return Err(truncated(got, length));
                }
                Ok(Fetched {
                    total: Some(got),
                    body,
                })
            }
        }
    }

    /// Reads exactly `want` bytes of a body (fewer is a truncated answer).
    fn read_body(&self, reader: impl std::io::Read, want: u64) -> Result<Vec<u8>, HttpError> {
        let mut bytes = Vec::with_capacity(usize::try_from(want.min(1 << 26)).unwrap_or(0));
        let read = reader.take(want).read_to_end(&mut bytes);
        self.counters
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let read = read.map_err(|e| self.body_error(&e, bytes.len() as u64, Some(want)));
        read?;
        if (bytes.len() as u64) < want {
            return Err(truncated(bytes.len() as u64, want));
        }
        Ok(bytes)
    }

    /// A body that failed after `got` bytes of `want`.
    fn body_error(&self, err: &std::io::Error, got: u64, want: Option<u64>) -> HttpError {
        if err.kind() == std::io::ErrorKind::TimedOut || err.to_string().contains("imeout") {
            return self.silent();
        }
        match want {
            Some(want) => truncated(got, want),
            None => HttpError::new(
                None,
                format!("the answer broke off ({})", crate::files::io_reason(err)),
                true,
            ),
        }
    }

    fn silent(&self) -> HttpError {
        HttpError::new(
            None,
            format!(
                "the server stopped answering (nothing for {} s)",
                self.timeout.as_secs()
            ),
            true,
        )
    }

    fn transport(&self, err: &ureq::Error) -> HttpError {
        match err {
            ureq::Error::Timeout(_) => self.silent(),
            ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => self.silent(),
            ureq::Error::Io(e) => HttpError::new(None, crate::files::io_reason(e), true),
            ureq::Error::HostNotFound => HttpError::new(None, "host not found", false),
            ureq::Error::ConnectionFailed => {
                HttpError::new(None, "cannot connect to the server", true)
            }
            other => HttpError::new(None, other.to_string(), false),
        }
    }
}

fn truncated(got: u64, want: u64) -> HttpError {
    HttpError::new(
        None,
        format!("truncated answer ({got} of {want} bytes)"),
        true,
    )
}

/// The Hub's statuses in words, with what to do.
fn status_error(status: u16, code: Option<&str>, has_token: bool) -> HttpError {
    let message = match (status, code) {
        (401, _) | (403, Some("GatedRepo")) if !has_token => format!(
            "HTTP {status}: the repo is private or gated: give a token with HF_TOKEN=hf_… \
             (or `hf auth login`), from an account that may read it"
        ),
        (401, _) => format!(
            "HTTP {status}: the token was refused (expired, or from an account that may not read this repo)"
        ),
        (403, Some("GatedRepo")) => format!(
            "HTTP {status}: a gated repo: accept its conditions on its Hub page with the token's account"
        ),
        (403, _) => format!("HTTP {status}: access refused"),
        (404, Some("RevisionNotFound")) => format!("HTTP {status}: no such revision"),
        (404, Some("EntryNotFound")) => format!("HTTP {status}: no such file in the repo"),
        (404, _) => format!("HTTP {status}: not found (no such repo, revision or file)"),
        (416, _) => format!("HTTP {status}: the range asked for is past the file's end"),
        (429, _) => format!("HTTP {status}: too many requests (the Hub's rate limit)"),
        (s, _) if s >= 500 => format!("HTTP {status}: the server failed"),
        _ => format!("HTTP {status}"),
    };
    HttpError::new(Some(status), message, status == 429 || status >= 500)
}

/// `bytes START-END/TOTAL` (TOTAL may be `*`).
fn parse_content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (span, total) = rest.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    Some((
        start.trim().parse().ok()?,
        end.trim().parse().ok()?,
        total.trim().parse().ok(),
    ))
}

/// `scheme://host[:port]` of `url`.
#[must_use]
pub fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url[after..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after + i);
    &url[..end]
}

/// `to` (a redirect's Location) read against `from`.
fn join(from: &str, to: &str) -> String {
    if to.contains("://") {
        to.to_owned()
    } else if to.starts_with("//") {
        let scheme = from.split("://").next().unwrap_or("https");
        format!("{scheme}:{to}")
    } else if to.starts_with('/') {
        format!("{}{to}", origin(from))
    } else {
        let path = from.split(['?', '#']).next().unwrap_or(from);
        let dir = path.rfind('/').map_or(path, |i| &path[..=i]);
        format!("{dir}{to}")
    }
}

/// The Hub token as `huggingface_hub` finds it: `HF_TOKEN`, else the file at
/// `HF_TOKEN_PATH`, else `token` in `HF_HOME` (by default
/// `$XDG_CACHE_HOME/huggingface`, `~/.cache/huggingface`).
#[must_use]
pub fn hub_token() -> Option<String> {
    let nonempty = |t: String| {
        let t = t.trim().to_owned();
        (!t.is_empty()).then_some(t)
    };
    let outside = &crate::environment::get().outside;
    if let Some(token) = outside.hf_token.clone().and_then(nonempty) {
        return Some(token);
    }
    let path = outside.hf_token_path.clone().or_else(|| {
        let home = outside
            .hf_home
            .clone()
            .or_else(|| outside.user_cache().map(|cache| cache.join("huggingface")))?;
        Some(home.join("token"))
    })?;
    crate::files::read_bounded_text(&path, 4096, "the Hub token")
        .ok()
        .and_then(nonempty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges_and_redirect_targets_are_read() {
        assert_eq!(
            parse_content_range("bytes 0-99/1000"),
            Some((0, 99, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, 9, None)));
        assert_eq!(parse_content_range("items 0-1/2"), None);
        assert_eq!(origin("http://127.0.0.1:8/a/b?c"), "http://127.0.0.1:8");
        assert_eq!(join("http://h:1/a/b/c", "/x/y"), "http://h:1/x/y");
        assert_eq!(join("http://h:1/a/b/c", "https://cdn/x"), "https://cdn/x");
        assert_eq!(join("https://h/a/b/c?q", "d"), "https://h/a/b/d");
        assert_eq!(join("https://h/a", "//cdn/x"), "https://cdn/x");
    }

    #[test]
    fn statuses_say_what_to_do() {
        let e = status_error(401, None, false);
        assert!(e.message.contains("HF_TOKEN"), "{}", e.message);
        assert!(!e.retry);
        assert!(
            status_error(403, Some("GatedRepo"), true)
                .message
                .contains("accept")
        );
        assert!(status_error(503, None, false).retry);
        assert!(status_error(404, None, false).message.contains("not found"));
    }
}
