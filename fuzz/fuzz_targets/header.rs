//! Any bytes as a whole safetensors file: parsing must return a result, never
//! panic, and never allocate more than the header cap; and the fast header
//! scanner reads whatever it accepts exactly as `serde_json` does.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::{parse_file_bytes, scanner_agrees_with_serde};

fuzz_target!(|data: &[u8]| {
    // The header bytes alone, as the scanner sees them after the length
    // prefix (it checks UTF-8 itself, string by string).
    if let Some(rest) = data.get(8..) {
        assert!(
            scanner_agrees_with_serde(rest),
            "{:?}",
            String::from_utf8_lossy(rest)
        );
    }
    if let Ok(header) = parse_file_bytes(Path::new("fuzz.safetensors"), data) {
        // A header that validates tiles its data exactly.
        let data_bytes = data.len() as u64 - header.data_start();
        let covered: u64 = header
            .tensors
            .iter()
            .map(|t| t.bytes())
            .sum();
        assert_eq!(covered, data_bytes);
    }
});
