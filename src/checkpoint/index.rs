//! `model.safetensors.index.json`: which shard holds which tensor.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::Deserialize;

use super::error::CheckpointError;

/// A parsed index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Tensor name to shard file name (relative to the index's folder).
    pub weight_map: BTreeMap<String, String>,
    /// `metadata.total_size`, when given.
    pub total_size: Option<u64>,
    /// The other `metadata` entries, as JSON text.
    pub metadata: BTreeMap<String, String>,
}

impl Index {
    /// The shard files the index names, each once, sorted by name.
    #[must_use]
    pub fn shard_files(&self) -> Vec<String> {
        let mut files: Vec<String> = self.weight_map.values().cloned().collect();
        files.sort_unstable();
        files.dedup();
        files
    }
}

#[derive(Deserialize)]
struct RawIndex {
    #[serde(default)]
    metadata: Option<BTreeMap<String, serde_json::Value>>,
    weight_map: BTreeMap<String, String>,
}

/// Reads and checks the index at `path`.
///
/// # Errors
/// When the index cannot be read, is not JSON, lacks a `weight_map` of
/// strings, or names a shard outside its folder.
pub fn read_index(path: &Path) -> Result<Index, CheckpointError> {
    let bytes = std::fs::read(path).map_err(|e| CheckpointError::unreadable(path, &e))?;
    parse_index(path, &bytes)
}

/// Parses index bytes (see [`read_index`]).
///
/// # Errors
/// As [`read_index`].
pub fn parse_index(path: &Path, bytes: &[u8]) -> Result<Index, CheckpointError> {
    let raw: RawIndex = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            CheckpointError::IndexShape {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        } else {
            CheckpointError::IndexNotJson {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        }
    })?;
    for shard in raw.weight_map.values() {
        let inside = Path::new(shard)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !inside || shard.is_empty() {
            return Err(CheckpointError::IndexShape {
                path: path.to_path_buf(),
                reason: format!("shard name `{shard}` is not a file in the index's folder"),
            });
        }
    }
    let mut metadata = BTreeMap::new();
    let mut total_size = None;
    for (key, value) in raw.metadata.unwrap_or_default() {
        if key == "total_size" {
            total_size = value.as_u64();
        }
        let text = match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        metadata.insert(key, text);
    }
    Ok(Index {
        weight_map: raw.weight_map,
        total_size,
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Index, CheckpointError> {
        parse_index(
            Path::new("/m/model.safetensors.index.json"),
            json.as_bytes(),
        )
    }

    #[test]
    fn a_valid_index() {
        let index = parse(
            r#"{"metadata":{"total_size":24,"format":"pt"},
                "weight_map":{"a":"s2.safetensors","b":"s1.safetensors","c":"s2.safetensors"}}"#,
        )
        .expect("valid");
        assert_eq!(index.total_size, Some(24));
        assert_eq!(index.shard_files(), ["s1.safetensors", "s2.safetensors"]);
        assert_eq!(index.metadata["format"], "pt");
    }

    #[test]
    fn dots_inside_a_file_name_are_not_a_parent_folder() {
        // Found by the fuzzer (a wrong assertion in the target, not a bug here).
        let index =
            parse(r#"{"weight_map":{"a":"mod..-00000of-00002.safeteno]s"}}"#).expect("valid");
        assert_eq!(index.shard_files(), ["mod..-00000of-00002.safeteno]s"]);
    }

    #[test]
    fn not_json() {
        let err = parse("{weight_map:").expect_err("bad");
        assert!(matches!(err, CheckpointError::IndexNotJson { .. }), "{err}");
    }

    #[test]
    fn wrong_shape_or_escaping_names() {
        for json in [
            r#"{"metadata":{}}"#,
            r#"{"weight_map":{"a":1}}"#,
            r#"{"weight_map":{"a":"../../etc/passwd"}}"#,
            r#"{"weight_map":{"a":"/abs.safetensors"}}"#,
            r#"{"weight_map":{"a":""}}"#,
        ] {
            let err = parse(json).expect_err(json);
            assert!(
                matches!(err, CheckpointError::IndexShape { .. }),
                "{json}: {err}"
            );
        }
    }
}
