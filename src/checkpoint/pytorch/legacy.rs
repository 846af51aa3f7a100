//! The legacy format before torch 1.6: five pickles, then the storages.

use super::listing::list;
use super::{
    BTreeMap, MAX_PICKLE_BYTES, Persistent, Source, Storage, TorchError, TorchFile, TorchFormat,
    Unpickled, Value, pickle,
};

pub(super) fn read_legacy(source: &dyn Source, file_bytes: u64) -> Result<TorchFile, TorchError> {
    let io = |e: &std::io::Error| TorchError::Io(super::super::io_reason(e));
    // The five pickles come first; their length is known only by reading
    // them, so the head is read growing until they all parse.
    let mut len = (1_u64 << 20).min(file_bytes);
    let (pickles, head_end, head) = loop {
        let head = source.read_at(0..len).map_err(|e| io(&e))?;
        match legacy_pickles(&head) {
            Ok((pickles, end)) => break (pickles, end, head),
            Err(pickle::PickleError::Truncated(_) | pickle::PickleError::NoStop)
                if len < file_bytes.min(MAX_PICKLE_BYTES) =>
            {
                len = (len * 4).min(file_bytes).min(MAX_PICKLE_BYTES);
            }
            Err(e) => return Err(e.into()),
        }
    };
    drop(head);
    let [_, _, sys_info, object, keys] = pickles;
    if let Some(Value::Dict(id)) = sys_info.root {
        let little = sys_info.pairs(id).iter().find_map(|(k, v)| match (k, v) {
            (Value::Str(k), Value::Bool(b)) if &**k == "little_endian" => Some(*b),
            _ => None,
        });
        if little == Some(false) {
            return Err(TorchError::BigEndian("big".into()));
        }
    }
    let listed = list(&object, head_end);
    let Some(Value::List(keys_id)) = keys.root else {
        return Err(TorchError::Archive(
            "the storage keys are not a list".into(),
        ));
    };
    let element_bytes: BTreeMap<&str, u64> = listed
        .storage_kinds
        .iter()
        .map(|(k, size)| (k.as_str(), *size))
        .collect();
    let mut places = BTreeMap::new();
    let mut at = head_end as u64;
    for key in keys.items(keys_id) {
        let Value::Str(key) = key else {
            return Err(TorchError::Archive("a storage key is not text".into()));
        };
        let count = source.read_at(at..at + 8).map_err(|e| io(&e))?;
        let numel = count
            .first_chunk::<8>()
            .map(|c| u64::from_le_bytes(*c))
            .ok_or_else(|| TorchError::Storage {
                key: key.to_string(),
                what: "has no element count: the file ends".into(),
            })?;
        let size = element_bytes.get(&**key).copied().unwrap_or(1);
        let bytes = numel.checked_mul(size).ok_or_else(|| TorchError::Storage {
            key: key.to_string(),
            what: "has a size that overflows".into(),
        })?;
        let start = at + 8;
        let end = start
            .checked_add(bytes)
            .filter(|&e| e <= file_bytes)
            .ok_or_else(|| TorchError::Storage {
                key: key.to_string(),
                what: format!("runs past the end of the file ({file_bytes} bytes)"),
            })?;
        places.insert(key.to_string(), (start, bytes));
        at = end;
    }
    let mut storages = Vec::with_capacity(listed.storages.len());
    for (key, needed) in &listed.storages {
        let &(start, bytes) = places.get(key).ok_or_else(|| TorchError::Storage {
            key: key.clone(),
            what: "is not in the file's storage list".into(),
        })?;
        if bytes < *needed {
            return Err(TorchError::Storage {
                key: key.clone(),
                what: format!("is {bytes} bytes; its tensors need {needed}"),
            });
        }
        storages.push(Storage {
            key: key.clone(),
            file_offset: start,
            bytes,
        });
    }
    Ok(listed.into_file(
        TorchFormat::Legacy,
        storages,
        &object,
        head_end as u64,
        None,
    ))
}

/// The legacy file's five pickles (magic, protocol, system, object,
/// storage keys) and where they end.
pub(super) fn legacy_pickles(head: &[u8]) -> Result<([Unpickled; 5], usize), pickle::PickleError> {
    let mut at = 0;
    let mut next = || -> Result<Unpickled, pickle::PickleError> {
        let rest = head.get(at..).unwrap_or_default();
        let u = pickle::unpickle(rest, Persistent::Legacy)?;
        at += u.end;
        Ok(u)
    };
    let out = [next()?, next()?, next()?, next()?, next()?];
    Ok((out, at))
}
