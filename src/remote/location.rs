//! What a user may type for a checkpoint that is not on this machine: a Hub
//! repo (`hf://ORG/REPO[@REVISION][/PATH]`, the scheme `huggingface_hub`'s
//! `HfFileSystem` reads; or its web address), or one file's URL.

/// The Hub's address when `HF_ENDPOINT` does not say another.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Which of the Hub's repo kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepoKind {
    /// A model repo (no prefix).
    Model,
    /// A dataset repo (`datasets/` before the name).
    Dataset,
}

impl RepoKind {
    /// The API's collection (`/api/models/…`).
    #[must_use]
    pub fn api(self) -> &'static str {
        match self {
            Self::Model => "models",
            Self::Dataset => "datasets",
        }
    }

    /// What comes before the repo name in its web and `resolve` addresses.
    #[must_use]
    pub fn url_prefix(self) -> &'static str {
        match self {
            Self::Model => "",
            Self::Dataset => "datasets/",
        }
    }
}

/// A place in a Hub repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPath {
    /// The Hub's base address (`HF_ENDPOINT`, or the URL's own origin).
    pub endpoint: String,
    /// Model or dataset.
    pub kind: RepoKind,
    /// `ORG/NAME` (or a legacy one-part name).
    pub repo: String,
    /// A branch, tag or commit; `None`: the default branch.
    pub revision: Option<String>,
    /// A subfolder or one file in the repo, without slashes at the ends;
    /// empty for the repo's top.
    pub path: String,
}

impl RepoPath {
    /// `hf://ORG/REPO[@REV][/PATH]`: how the repo is named in messages.
    #[must_use]
    pub fn display(&self) -> String {
        let mut text = format!("hf://{}{}", self.kind.url_prefix(), self.repo);
        if let Some(rev) = &self.revision {
            text.push('@');
            text.push_str(&rev.replace('/', "%2F"));
        }
        if !self.path.is_empty() {
            text.push('/');
            text.push_str(&self.path);
        }
        text
    }

    /// Whether `path` names one checkpoint file rather than a folder.
    #[must_use]
    pub fn names_file(&self) -> bool {
        is_file_name(&self.path)
    }
}

/// A checkpoint somewhere on the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A Hub repo (or a folder or file in it).
    Hub(RepoPath),
    /// One file's address outside the Hub's conventions.
    Url(String),
}

impl Location {
    /// Reads `text` as a remote location; `None` when it is a local path.
    /// `endpoint` is the Hub's base address (see [`endpoint_from_env`]).
    ///
    /// # Errors
    /// A remote address that names no repo or file, in words.
    pub fn parse(text: &str, endpoint: &str) -> Option<Result<Self, LocationError>> {
        if let Some(rest) = text.strip_prefix("hf://") {
            return Some(parse_hf(rest, endpoint).map(Self::Hub));
        }
        let (scheme, rest) = text.split_once("://")?;
        if !matches!(scheme, "http" | "https") {
            return None;
        }
        Some(parse_url(text, scheme, rest, endpoint))
    }

    /// How the location is named in messages (without a URL's query, which
    /// may carry a signature).
    #[must_use]
    pub fn display(&self) -> String {
        match self {
            Self::Hub(repo) => repo.display(),
            Self::Url(url) => crate::units::location_data(url.split('?').next().unwrap_or(url)),
        }
    }
}

/// Whether `text` is a remote address (`hf://`, `http://`, `https://`)
/// rather than a path on this machine.
#[must_use]
pub fn is_address(text: &str) -> bool {
    ["hf://", "https://", "http://"]
        .iter()
        .any(|scheme| text.starts_with(scheme))
}

/// `HF_ENDPOINT` without a trailing slash, or the Hub's own address.
#[must_use]
pub fn endpoint_from_env() -> String {
    crate::environment::get()
        .outside
        .hf_endpoint
        .as_deref()
        .map(|e| e.trim().trim_end_matches('/').to_owned())
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
}

/// A file name a checkpoint is read from.
fn is_file_name(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    [".safetensors", ".gguf", ".json"]
        .iter()
        .any(|s| crate::files::has_suffix(name, s))
}

/// `%XX` escapes decoded (revisions such as `refs%2Fpr%2F1`).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Segments of a path with the empty ones (doubled or edge slashes) left out.
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Why a text that looks like an address names no repo or file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// A repo's org or name with characters the Hub does not allow.
    #[error("`{0}` is not a Hub repo name")]
    BadName(String),
    /// `.` or `..` in the path inside a repo.
    #[error("`{0}` in a repo path")]
    DotInPath(String),
    /// `hf://spaces/…`.
    #[error("Spaces hold apps, not checkpoints: hf://ORG/REPO names a model repo")]
    Space,
    /// `hf://ORG/REPO@` with nothing after the `@`.
    #[error("no revision after `@`: {USAGE}")]
    NoRevision,
    /// `hf://` alone.
    #[error("no repo: {USAGE}")]
    NoRepo,
    /// More or fewer parts than ORG/REPO.
    #[error("`{0}` is not ORG/REPO: {USAGE}")]
    NotOrgRepo(String),
    /// A URL that is neither a Hub page nor a checkpoint file (shown
    /// without its query or password).
    #[error("not a Hub repo address nor a .safetensors or .gguf file: {0}")]
    NotACheckpoint(String),
}

const USAGE: &str = "a Hub repo is hf://ORG/REPO[@REVISION][/PATH]";

fn checked_name(part: &str) -> Result<(), LocationError> {
    let ok = !part.is_empty()
        && part != "."
        && part != ".."
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(LocationError::BadName(part.to_owned()))
    }
}

fn checked_path(parts: &[&str]) -> Result<String, LocationError> {
    if let Some(bad) = parts.iter().find(|p| **p == "." || **p == "..") {
        return Err(LocationError::DotInPath((*bad).to_owned()));
    }
    Ok(parts.join("/"))
}

/// `[datasets/]ORG/REPO[@REV][/PATH]` after `hf://`.
fn parse_hf(rest: &str, endpoint: &str) -> Result<RepoPath, LocationError> {
    let (kind, rest) = if let Some(r) = rest.strip_prefix("datasets/") {
        (RepoKind::Dataset, r)
    } else if rest.starts_with("spaces/") {
        return Err(LocationError::Space);
    } else {
        (RepoKind::Model, rest)
    };
    // The revision follows `@` up to the next slash; `refs/pr/N` and
    // `refs/convert/NAME` keep their slashes (as `HfFileSystem` reads them).
    let (repo_part, revision, path) = if let Some((repo, after)) = rest.split_once('@') {
        let parts = segments(after);
        let take = if parts.first() == Some(&"refs") { 3 } else { 1 };
        if parts.len() < take {
            return Err(LocationError::NoRevision);
        }
        let revision = percent_decode(&parts[..take].join("/"));
        (repo.to_owned(), Some(revision), parts[take..].to_vec())
    } else {
        let parts = segments(rest);
        if parts.is_empty() {
            return Err(LocationError::NoRepo);
        }
        // ORG/NAME, unless the second part is a file (a legacy one-part
        // repo such as `gpt2/model.safetensors`).
        let split = match parts.get(1) {
            Some(second) if !is_file_name(second) => 2,
            _ => 1,
        };
        (parts[..split].join("/"), None, parts[split..].to_vec())
    };
    let repo_parts = segments(&repo_part);
    if repo_parts.is_empty() || repo_parts.len() > 2 {
        return Err(LocationError::NotOrgRepo(repo_part));
    }
    for part in &repo_parts {
        checked_name(part)?;
    }
    Ok(RepoPath {
        endpoint: endpoint.to_owned(),
        kind,
        repo: repo_parts.join("/"),
        revision,
        path: checked_path(&path)?,
    })
}

/// `scheme://host/…`: a Hub page or `resolve` address, else one file.
fn parse_url(
    text: &str,
    scheme: &str,
    rest: &str,
    endpoint: &str,
) -> Result<Location, LocationError> {
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let origin = format!("{scheme}://{host}");
    let hub = if origin.eq_ignore_ascii_case(endpoint) {
        Some(endpoint.to_owned())
    } else if scheme == "https" && matches!(host, "huggingface.co" | "hf.co") {
        Some(DEFAULT_ENDPOINT.to_owned())
    } else {
        None
    };
    if let Some(endpoint) = hub
        && let Some(repo) = hub_page(&segments(path), &endpoint)?
    {
        return Ok(Location::Hub(repo));
    }
    if is_file_name(path) && !crate::files::has_suffix(path, ".json") {
        Ok(Location::Url(text.to_owned()))
    } else {
        Err(LocationError::NotACheckpoint(crate::units::location_data(
            text.split('?').next().unwrap_or(text),
        )))
    }
}

/// `ORG/REPO`, `ORG/REPO/tree/REV[/PATH]`, `…/blob|resolve/REV/FILE`.
fn hub_page(parts: &[&str], endpoint: &str) -> Result<Option<RepoPath>, LocationError> {
    let (kind, parts) = match parts.split_first() {
        Some((&"datasets", rest)) => (RepoKind::Dataset, rest),
        _ => (RepoKind::Model, parts),
    };
    if parts.len() < 2 || parts.first() == Some(&"api") {
        return Ok(None);
    }
    let (repo, rest) = parts.split_at(2);
    let (revision, path) = match rest {
        [] => (None, Vec::new()),
        [verb, rev, path @ ..] if matches!(*verb, "tree" | "blob" | "resolve") => {
            (Some(percent_decode(rev)), path.to_vec())
        }
        _ => return Ok(None),
    };
    for part in repo {
        checked_name(part)?;
    }
    Ok(Some(RepoPath {
        endpoint: endpoint.to_owned(),
        kind,
        repo: repo.join("/"),
        revision,
        path: checked_path(&path)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EP: &str = "https://huggingface.co";

    fn hub(text: &str) -> RepoPath {
        match Location::parse(text, EP) {
            Some(Ok(Location::Hub(repo))) => repo,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn hf_scheme_names_repo_revision_and_path() {
        let r = hub("hf://mlx-community/Qwen3-8B-4bit");
        assert_eq!(
            (r.repo.as_str(), r.revision, r.path.as_str()),
            ("mlx-community/Qwen3-8B-4bit", None, "")
        );
        let r = hub("hf://org/repo@v1.0/sub/dir/");
        assert_eq!(
            (r.repo.as_str(), r.revision.as_deref(), r.path.as_str()),
            ("org/repo", Some("v1.0"), "sub/dir")
        );
        let r = hub("hf://org/repo@refs/pr/3/model.safetensors");
        assert_eq!(r.revision.as_deref(), Some("refs/pr/3"));
        assert_eq!(r.path, "model.safetensors");
        assert!(r.names_file());
        let r = hub("hf://org/repo@refs%2Fpr%2F3");
        assert_eq!(r.revision.as_deref(), Some("refs/pr/3"));
        assert_eq!(r.display(), "hf://org/repo@refs%2Fpr%2F3");
        let r = hub("hf://datasets/org/data/w");
        assert_eq!((r.kind, r.path.as_str()), (RepoKind::Dataset, "w"));
        let r = hub("hf://gpt2/model.safetensors");
        assert_eq!(
            (r.repo.as_str(), r.path.as_str()),
            ("gpt2", "model.safetensors")
        );
    }

    #[test]
    fn web_addresses_of_the_hub_are_repos_and_others_are_files() {
        let r = hub("https://huggingface.co/org/repo");
        assert_eq!((r.repo.as_str(), r.revision), ("org/repo", None));
        let r = hub("https://huggingface.co/org/repo/tree/main/sub");
        assert_eq!(
            (r.revision.as_deref(), r.path.as_str()),
            (Some("main"), "sub")
        );
        let r = hub("https://hf.co/org/repo/resolve/abc/m.safetensors?download=true");
        assert_eq!(r.path, "m.safetensors");
        let local = Location::parse(
            "http://127.0.0.1:9/org/repo/blob/x/a.gguf",
            "http://127.0.0.1:9",
        );
        assert!(
            matches!(local, Some(Ok(Location::Hub(ref r))) if r.endpoint == "http://127.0.0.1:9")
        );
        assert_eq!(
            Location::parse("https://example.com/x/y.safetensors?sig=1", EP),
            Some(Ok(Location::Url(
                "https://example.com/x/y.safetensors?sig=1".into()
            )))
        );
        assert!(matches!(
            Location::parse("https://example.com/page", EP),
            Some(Err(_))
        ));
        assert_eq!(Location::parse("/models/x", EP), None);
        assert_eq!(Location::parse("ftp://x/y.safetensors", EP), None);
    }

    #[test]
    fn malformed_repo_names_are_refused_in_words() {
        for bad in [
            "hf://",
            "hf://org/re po",
            "hf://org/repo@",
            "hf://spaces/a/b",
            "hf://a/b/../c",
        ] {
            assert!(matches!(Location::parse(bad, EP), Some(Err(_))), "{bad}");
        }
    }
}
