//! The zip format `torch.save` writes since 1.6: each storage an entry
//! stored uncompressed, located in the file.

use super::listing::list;
use super::source::{LocalFile, SourceReader};
use super::*;

/// Where each entry's data starts, from the central directory alone: torch
/// writes its records one after the other, so an entry's data ends where
/// the next entry's local header begins (the central directory after the
/// last), less a data descriptor when the entry has one; and it aligns
/// every record's data to 64 bytes. A start that is not so aligned, or
/// falls inside its own local header, is `None`: read the header then.
pub(super) fn predicted_data_starts<R: std::io::Read + std::io::Seek>(
    zip: &zip::ZipArchive<R>,
) -> Vec<Option<u64>> {
    let mut order: Vec<(u64, usize)> = (0..zip.len())
        .filter_map(|i| zip.by_index_data(i).ok().map(|e| (e.header_start(), i)))
        .collect();
    order.sort_unstable();
    let mut starts = vec![None; zip.len()];
    for (k, &(header, i)) in order.iter().enumerate() {
        let next = order
            .get(k + 1)
            .map_or(zip.central_directory_start(), |&(h, _)| h);
        let Ok(entry) = zip.by_index_data(i) else {
            continue;
        };
        let descriptor = if entry.flags().is_using_data_descriptor() {
            if entry.compressed_size() >= u64::from(u32::MAX) {
                24
            } else {
                16
            }
        } else {
            0
        };
        let name = entry.name_raw().len() as u64;
        let start = next
            .checked_sub(entry.compressed_size())
            .and_then(|s| s.checked_sub(descriptor));
        starts[i] = start.filter(|&s| s % 64 == 0 && s >= header + 30 + name);
    }
    starts
}

/// Whether [`predicted_data_starts`] gives the local headers' own data
/// offsets for every storage of the zip-format torch file at `path` (for
/// the tests against torch's writer).
///
/// # Errors
/// The file cannot be read as a zip archive.
pub fn predicted_offsets_agree(path: &Path) -> Result<bool, TorchError> {
    let (file, meta) = crate::files::open_regular(path).map_err(|e| TorchError::Io(e.reason()))?;
    let source = LocalFile(file, meta.len());
    let reader = SourceReader::new(&source, meta.len());
    let mut zip = zip::ZipArchive::new(reader).map_err(|e| TorchError::Archive(e.to_string()))?;
    let predicted = predicted_data_starts(&zip);
    for (i, want) in predicted.into_iter().enumerate() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| TorchError::Archive(e.to_string()))?;
        if want.is_none() || entry.data_start() != want {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Where each storage's bytes are in a zip archive: a local file's from its
/// entry's local header (cheap), a remote one's from `predicted` (the
/// central directory), else from its local header.
pub(super) fn locate_storages<R: std::io::Read + std::io::Seek>(
    zip: &mut zip::ZipArchive<R>,
    predicted: &[Option<u64>],
    wanted: &[(String, u64)],
    prefix: &str,
    local: bool,
    file_bytes: u64,
) -> Result<Vec<Storage>, TorchError> {
    let archive_err = |e: zip::result::ZipError| TorchError::Archive(e.to_string());
    let mut storages = Vec::with_capacity(wanted.len());
    for (key, needed) in wanted {
        let name = format!("{prefix}data/{key}");
        let i = zip
            .index_for_name(&name)
            .ok_or_else(|| TorchError::Storage {
                key: key.clone(),
                what: "is not in the archive".into(),
            })?;
        let (compression, bytes) = {
            let entry = zip.by_index_data(i).map_err(archive_err)?;
            (entry.compression(), entry.size())
        };
        if compression != zip::CompressionMethod::Stored {
            return Err(TorchError::Compressed(name));
        }
        // A local file's header is read (cheap); a remote one's is
        // predicted from the central directory, else read.
        let known = predicted.get(i).copied().flatten().filter(|_| !local);
        let start = match known {
            Some(start) => start,
            None => zip
                .by_index_raw(i)
                .map_err(archive_err)?
                .data_start()
                .ok_or_else(|| TorchError::Storage {
                    key: key.clone(),
                    what: "has no data offset".into(),
                })?,
        };
        if bytes < *needed || start.checked_add(bytes).is_none_or(|end| end > file_bytes) {
            return Err(TorchError::Storage {
                key: key.clone(),
                what: format!(
                    "is {bytes} bytes; its tensors need {needed} within the file's {file_bytes}"
                ),
            });
        }
        storages.push(Storage {
            key: key.clone(),
            file_offset: start,
            bytes,
        });
    }
    Ok(storages)
}

pub(super) fn read_zip(source: &dyn Source, file_bytes: u64) -> Result<TorchFile, TorchError> {
    let archive_err = |e: zip::result::ZipError| TorchError::Archive(e.to_string());
    let reader = SourceReader::new(source, file_bytes);
    let mut zip = zip::ZipArchive::new(reader).map_err(archive_err)?;
    let predicted = predicted_data_starts(&zip);
    // One top folder holds every record: `<name>/data.pkl`.
    let pkl_name = zip
        .file_names()
        .filter_map(Result::ok)
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| TorchError::Archive("no `<name>/data.pkl` record".into()))?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_owned();
    let read_record = |zip: &mut zip::ZipArchive<_>, name: &str, cap: u64| {
        let Some(i) = zip.index_for_name(name) else {
            return Ok(None);
        };
        let entry = zip.by_index_raw(i).map_err(archive_err)?;
        if entry.compression() != zip::CompressionMethod::Stored {
            return Err(TorchError::Compressed(name.to_owned()));
        }
        if entry.size() > cap {
            return Err(TorchError::Archive(format!(
                "record `{name}` is {} bytes, over the {cap}-byte cap",
                entry.size()
            )));
        }
        let mut bytes = Vec::new();
        entry
            .take(cap)
            .read_to_end(&mut bytes)
            .map_err(|e| TorchError::Io(super::super::io_reason(&e)))?;
        Ok(Some(bytes))
    };
    if let Some(order) = read_record(&mut zip, &format!("{prefix}byteorder"), 64)? {
        let order = String::from_utf8_lossy(&order).trim().to_owned();
        if order != "little" {
            return Err(TorchError::BigEndian(order));
        }
    }
    let version = read_record(&mut zip, &format!("{prefix}version"), 64)?
        .map(|v| String::from_utf8_lossy(&v).trim().to_owned());
    let pkl = read_record(&mut zip, &pkl_name, MAX_PICKLE_BYTES)?.unwrap_or_default();
    let unpickled = pickle::unpickle(&pkl, Persistent::Zip)?;
    let listed = list(&unpickled, pkl.len());
    let storages = locate_storages(
        &mut zip,
        &predicted,
        &listed.storages,
        &prefix,
        source.is_local(),
        file_bytes,
    )?;
    Ok(listed.into_file(
        TorchFormat::Zip,
        storages,
        &unpickled,
        pkl.len() as u64,
        version,
    ))
}
