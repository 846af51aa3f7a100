//! Any bytes as a view file: checked rules or an error naming a line, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::viewfile::{ViewError, ViewFile};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ViewFile::parse(Path::new("view.json"), text) {
        Ok(file) => {
            // Every accepted rule compiled and knows where it came from.
            for rename in &file.renames {
                assert!(rename.origin.starts_with("rename["));
                let _ = rename
                    .pattern
                    .replace("model.layers.0.weight", rename.to.as_str());
            }
            for fixup in &file.fixups {
                assert!(fixup.origin.starts_with("fixup["));
            }
        }
        Err(ViewError::Json { line, .. } | ViewError::Rule { line, .. }) => {
            assert!(line >= 1 && line <= text.lines().count().max(1) + 1);
        }
        Err(other) => panic!("a parse can only fail on JSON or a rule: {other}"),
    }
});
