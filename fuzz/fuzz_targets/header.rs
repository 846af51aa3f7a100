//! Any bytes as a whole safetensors file: parsing must return a result, never
//! panic, and never allocate more than the header cap; and the fast header
//! scanner reads whatever it accepts exactly as `serde_json` does.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightscope_fuzz::checkpoint::{parse_file_bytes, scanner_agrees_with_serde};

fuzz_target!(|data: &[u8]| {
    // The header text alone, as the scanner sees it after the length prefix.
    if let Some(text) = data.get(8..).and_then(|rest| std::str::from_utf8(rest).ok()) {
        assert!(scanner_agrees_with_serde(text), "{text:?}");
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
