//! Any bytes as an index file or a config.json: a result, never a panic;
//! the same result with the index scanner as without it.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::{index_scanner_agrees_with_serde, parse_config, parse_index};

fuzz_target!(|data: &[u8]| {
    // The fast scanner never changes what an index reads as.
    assert!(index_scanner_agrees_with_serde(data));
    if let Ok((index, entries)) = parse_index(Path::new("model.safetensors.index.json"), data) {
        assert_eq!(index.tensor_count, entries.len());
        assert!(
            entries
                .iter()
                .all(|(_, file)| *file < index.shard_files.len())
        );
        // Every shard an accepted index names stays inside the index's folder.
        for file in &index.shard_files {
            let components: Vec<Component<'_>> = Path::new(file).components().collect();
            assert!(!components.is_empty());
            assert!(
                components.iter().all(|c| matches!(c, Component::Normal(_))),
                "{file}"
            );
        }
    }
    let _ = parse_config(Path::new("config.json"), data);
});
