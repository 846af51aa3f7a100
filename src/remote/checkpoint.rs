//! A checkpoint read from a Hub repo or a URL: the files are chosen from
//! the repo's listing as a local folder's would be, and each header comes
//! through [`Remote::header_into`] (one range request, or the cache).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Location, Remote, in_folder};
use crate::checkpoint::torch_checkpoint::is_torch_name;
use crate::checkpoint::{
    Checkpoint, CheckpointError, Layout, NameDigest, Parsed, config, header, index,
};
use crate::files::has_suffix;

/// Headers fetched at once, each by a thread with one request at a time
/// (so at most this many requests in flight at any host). A header costs
/// two round trips (the Hub's redirect, the storage's range): over a 40 ms
/// link, 163 shards took 1.9 s with 8 in flight, 0.6 s with 32
/// (`cargo bench --bench remote_inspect`, docs/remote.md). The client's
/// pool keeps as many connections a host (`http::Client`).
pub(super) const PARALLEL_FETCHES: usize = 32;

/// Threads reading `files`' headers: [`PARALLEL_FETCHES`] to keep requests
/// in flight, or one a core when the cache holds every header (more
/// threads than cores only took turns: 1.4x a local folder's time for a
/// 163-shard repo against 1.1x).
fn header_workers(remote: &Remote, files: &[(String, PathBuf)]) -> usize {
    if files.iter().all(|(file, _)| remote.has_header(file)) {
        crate::par::cores()
    } else {
        PARALLEL_FETCHES
    }
}

/// What to read from a remote checkpoint.
struct Plan {
    /// The folder in the repo the checkpoint's files are named from.
    folder: String,
    layout: PlanLayout,
    /// Whether that folder has a `config.json`.
    config: bool,
    /// Whether the files are PyTorch files (`.bin`, `.pth`, `.pt`) rather
    /// than safetensors.
    torch: bool,
}

enum PlanLayout {
    /// The index (its name in the folder).
    Indexed(String),
    /// Shard files (names in the folder), sorted.
    Folder(Vec<String>),
    /// One file (its name in the folder).
    Single(String),
}

fn split_file(path: &str) -> (String, String) {
    match path.rsplit_once('/') {
        Some((folder, name)) => (folder.to_owned(), name.to_owned()),
        None => (String::new(), path.to_owned()),
    }
}

/// Chooses the files as [`Checkpoint::open`] would in a local folder.
fn plan(remote: &Remote, root: &Path) -> Result<Plan, CheckpointError> {
    let unreadable = |reason: String| CheckpointError::Unreadable {
        path: root.to_path_buf(),
        reason,
    };
    let repo = match remote.location() {
        Location::Url(url) => {
            let path = url.split(['?', '#']).next().unwrap_or(url);
            let name = path.rsplit('/').next().unwrap_or(path).to_owned();
            let torch = is_torch_name(&name);
            return Ok(Plan {
                folder: String::new(),
                layout: PlanLayout::Single(name),
                config: false,
                torch,
            });
        }
        Location::Hub(repo) => repo,
    };
    let listed = |name: &str| remote.files().iter().any(|f| f == name);
    if repo.names_file() {
        let (folder, name) = split_file(&repo.path);
        if !listed(&repo.path) {
            return Err(unreadable(
                "no such file in the repo at this revision".into(),
            ));
        }
        let config = listed(&in_folder(&folder, "config.json"));
        let torch = is_torch_name(&name) || has_suffix(&name, ".bin.index.json");
        let layout = if has_suffix(&name, ".json") {
            PlanLayout::Indexed(name)
        } else {
            PlanLayout::Single(name)
        };
        return Ok(Plan {
            folder,
            layout,
            config,
            torch,
        });
    }
    let folder = repo.path.clone();
    let prefix = if folder.is_empty() {
        String::new()
    } else {
        format!("{folder}/")
    };
    let mut children: Vec<&str> = remote
        .files()
        .iter()
        .filter_map(|f| f.strip_prefix(&prefix))
        .filter(|f| !f.contains('/'))
        .collect();
    children.sort_unstable();
    let config = children.contains(&"config.json");
    // Safetensors first: the index, else each file; then a repo with only
    // PyTorch files likewise.
    let formats: [(bool, &str, FileRule); 2] = [
        (false, ".safetensors.index.json", |f| {
            f.ends_with(".safetensors")
        }),
        (true, ".bin.index.json", is_torch_name),
    ];
    for (torch, index_ending, is_file) in formats {
        let layout = if let Some(index) = children.iter().find(|f| f.ends_with(index_ending)) {
            PlanLayout::Indexed((*index).to_owned())
        } else {
            let files: Vec<String> = children
                .iter()
                .filter(|f| is_file(f))
                .map(|f| (*f).to_owned())
                .collect();
            if files.is_empty() {
                continue;
            }
            PlanLayout::Folder(files)
        };
        return Ok(Plan {
            folder,
            layout,
            config,
            torch,
        });
    }
    Err(nothing_to_open(remote, &children, &prefix, root))
}

/// Whether a file's name is one of a format's files.
type FileRule = fn(&str) -> bool;

/// Why a repo folder holds no safetensors checkpoint, with what to type.
fn nothing_to_open(
    remote: &Remote,
    children: &[&str],
    prefix: &str,
    root: &Path,
) -> CheckpointError {
    let unreadable = |reason: String| CheckpointError::Unreadable {
        path: root.to_path_buf(),
        reason,
    };
    let ggufs: Vec<&str> = children
        .iter()
        .copied()
        .filter(|f| has_suffix(f, ".gguf"))
        .collect();
    if let Some(first) = ggufs.first() {
        let listed = ggufs.iter().take(6).copied().collect::<Vec<_>>().join(", ");
        let more = if ggufs.len() > 6 { ", …" } else { "" };
        return unreadable(format!(
            "holds {} GGUF files ({listed}{more}): name one, as in {}/{first}",
            ggufs.len(),
            root.display()
        ));
    }
    let deeper = remote
        .files()
        .iter()
        .filter_map(|f| f.strip_prefix(prefix))
        .find(|f| f.ends_with(".safetensors"))
        .and_then(|f| f.rsplit_once('/'))
        .map(|(sub, _)| sub.to_owned());
    match deeper {
        Some(sub) => unreadable(format!(
            "no .safetensors files here; there are some in `{sub}/`: add /{sub} to the address"
        )),
        None => CheckpointError::EmptyFolder {
            path: root.to_path_buf(),
        },
    }
}

/// An indexed checkpoint in a Hub repo, read by [`indexed`].
struct Indexed {
    layout: Layout,
    files: Vec<(String, PathBuf)>,
    headers: Vec<Parsed>,
    problems: Vec<CheckpointError>,
    index_digests: Vec<NameDigest>,
}

/// The index `index_file` of `folder` and its shards' headers (`read`).
/// As for a folder on the disk, the headers of the folder's `.safetensors`
/// files (the API listed them) are fetched while the first fetching thread
/// reads and parses the index (8 MB for a 90k-tensor repo), which then
/// picks its shards, in its order.
#[allow(clippy::too_many_arguments)]
fn indexed(
    remote: &Remote,
    torch: bool,
    folder: &str,
    index_file: &str,
    shown: &dyn Fn(&str) -> PathBuf,
    report: &(dyn Fn(usize, usize) + Sync),
    read: &crate::checkpoint::ReadHeader<'_>,
) -> Result<Indexed, CheckpointError> {
    let index_path = shown(index_file);
    let listed: Vec<(String, PathBuf)> = shards_listed(remote, folder, torch)
        .map(|name| {
            let path = shown(&name);
            (name, path)
        })
        .collect();
    let whole = || {
        remote
            .whole(index_file, index::MAX_INDEX_BYTES)
            .map_err(|e| CheckpointError::Unreadable {
                path: index_path.clone(),
                reason: e.message,
            })
    };
    let fold = |d: &mut NameDigest, name: &str| d.add(crate::checkpoint::table::name_hash(name));
    // From the cache a piece at a time, as a local index is read (no 8 MB
    // buffer); else fetched whole.
    let read_index = || match remote.whole_kept(index_file) {
        Some(kept) => {
            index::fold_index_reader(&index_path, std::io::BufReader::new(kept), whole, fold)
        }
        None => index::fold_index_bytes(&index_path, &whole()?, fold),
    };
    let index_read = std::sync::OnceLock::new();
    let workers = header_workers(remote, &listed);
    let listed_headers = crate::checkpoint::parse_all(
        &listed,
        report,
        &|| {
            index_read.get_or_init(read_index);
        },
        workers,
        read,
    );
    let (index, index_digests) = index_read.into_inner().unwrap_or_else(read_index)?;
    // One set of the listing, not a search of it per shard: an index of
    // 200k shards against a listing of 1M files stays linear.
    let listing: std::collections::HashSet<&str> =
        remote.files().iter().map(String::as_str).collect();
    let in_repo = |file: &str, _: &Path| {
        listing.is_empty() || listing.contains(in_folder(folder, file).as_str())
    };
    let (files, headers, problems) = crate::checkpoint::in_index_order(
        &index,
        &index_path,
        listed,
        listed_headers,
        shown,
        &in_repo,
        PARALLEL_FETCHES,
        read,
    );
    Ok(Indexed {
        layout: Layout::Indexed { index_path, index },
        files,
        headers,
        problems,
        index_digests,
    })
}

/// The `.safetensors` files directly in `folder` of the repo, as the API
/// listed them (names in the folder).
fn shards_listed<'a>(
    remote: &'a Remote,
    folder: &'a str,
    torch: bool,
) -> impl Iterator<Item = String> + 'a {
    remote.files().iter().filter_map(move |path| {
        let name = if folder.is_empty() {
            path.as_str()
        } else {
            path.strip_prefix(folder)?.strip_prefix('/')?
        };
        let shard = if torch {
            is_torch_name(name)
        } else {
            has_suffix(name, ".safetensors")
        };
        (!name.contains('/') && shard).then(|| name.to_owned())
    })
}

impl Checkpoint {
    /// Opens a checkpoint in a Hub repo or at a URL (see `docs/remote.md`).
    pub(crate) fn open_remote(
        location: Location,
        report: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Self, CheckpointError> {
        let root = PathBuf::from(location.display());
        let failed = |path: &Path, e: crate::remote::HttpError| {
            CheckpointError::unreadable_for(path, e.message)
        };
        let mut remote = Remote::connect(location).map_err(|e| failed(&root, e))?;
        let plan = plan(&remote, &root)?;
        remote.set_folder(&plan.folder);
        let remote = Arc::new(remote);
        if let PlanLayout::Single(name) = &plan.layout
            && has_suffix(name, ".gguf")
        {
            return Self::open_remote_gguf(remote, name, &root);
        }
        let hub_root = match remote.location() {
            Location::Hub(repo) if repo.names_file() => {
                let mut top = repo.clone();
                top.path.clone_from(&plan.folder);
                PathBuf::from(top.display())
            }
            _ => root.clone(),
        };
        let shown = |name: &str| match &plan.layout {
            PlanLayout::Single(_) => root.clone(),
            _ => PathBuf::from(format!("{}/{name}", hub_root.display())),
        };
        let torch = crate::checkpoint::torch_checkpoint::TorchReader::default();
        let read = |(file, path): &(String, PathBuf), buf: &mut Vec<u8>| -> Parsed {
            if plan.torch {
                let source = super::RemoteFile::new(&remote, file);
                return torch.read_source(path, &source);
            }
            let (size, at) = remote
                .header_into(file, header::HEADER_CAP_BYTES, buf)
                .map_err(|e| failed(path, e))?;
            let mut parsed = header::parse_prefix(path, size, buf.get(at..).unwrap_or_default())?;
            let hashes = std::mem::take(&mut parsed.name_hashes);
            Ok((parsed, hashes))
        };
        let mut index_digests = None;
        let (layout, files, headers, problems) = match &plan.layout {
            PlanLayout::Single(name) => {
                let files = vec![(name.clone(), root.clone())];
                let headers = crate::checkpoint::parse_all(&files, report, &|| {}, 1, &read);
                (Layout::SingleFile, files, headers, Vec::new())
            }
            PlanLayout::Folder(names) => {
                let files: Vec<_> = names.iter().map(|n| (n.clone(), shown(n))).collect();
                let workers = header_workers(&remote, &files);
                let headers = crate::checkpoint::parse_all(&files, report, &|| {}, workers, &read);
                (Layout::Folder, files, headers, Vec::new())
            }
            PlanLayout::Indexed(index_file) => {
                let read = indexed(
                    &remote,
                    plan.torch,
                    &plan.folder,
                    index_file,
                    &shown,
                    report,
                    &read,
                )?;
                index_digests = Some((index_file, read.index_digests));
                (read.layout, read.files, read.headers, read.problems)
            }
        };
        let (mut checkpoint, shard_digests) =
            Self::assemble_parsed(hub_root.clone(), layout, files, headers, problems);
        if plan.torch {
            checkpoint.attach_torch(&torch);
        }
        if let Some((index_file, digests)) = index_digests {
            // Read again only when a shard disagrees (from the cache).
            let reread = |path: &Path| {
                remote
                    .whole(index_file, index::MAX_INDEX_BYTES)
                    .map_err(|e| failed(path, e))
            };
            checkpoint.check_index(&digests, &shard_digests, &reread);
        }
        if plan.config {
            let path = shown("config.json");
            let parsed = remote
                .whole("config.json", config::MAX_CONFIG_BYTES)
                .map_err(|e| failed(&path, e))
                .and_then(|bytes| config::parse_config(&path, &bytes));
            match parsed {
                Ok(config) => checkpoint.config = Some(config),
                Err(err) => checkpoint.problems.push(err),
            }
        }
        remote.trim_cache();
        checkpoint.remote = Some(remote);
        Ok(checkpoint)
    }

    /// A GGUF file in a Hub repo or at a URL: its header read by growing
    /// range requests (or from the cache), its tensors read through.
    fn open_remote_gguf(
        remote: Arc<Remote>,
        name: &str,
        root: &Path,
    ) -> Result<Self, CheckpointError> {
        let failed = |reason: String| CheckpointError::Unreadable {
            path: root.to_path_buf(),
            reason,
        };
        let (size, header) = remote
            .prefix_with(name, crate::checkpoint::gguf::MAX_HEADER_BYTES, |reader| {
                crate::checkpoint::gguf::GgufHeader::from_reader(reader)
            })
            .map_err(|e| failed(e.to_string()))?;
        header.fits(size).map_err(|e| failed(e.to_string()))?;
        let mut checkpoint = Self::from_gguf(header, size, root.to_path_buf(), name.to_owned())?;
        remote.trim_cache();
        checkpoint.remote = Some(remote);
        Ok(checkpoint)
    }
}
