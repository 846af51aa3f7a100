//! Any bytes as a whole safetensors file: parsing must return a result, never
//! panic, and never allocate more than the header cap.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightscope_fuzz::checkpoint::parse_file_bytes;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = parse_file_bytes(Path::new("fuzz.safetensors"), data) {
        // A header that validates tiles its data exactly.
        let data_bytes = data.len() as u64 - header.data_start();
        let covered: u64 = header
            .tensors
            .iter()
            .map(|t| t.data_offsets.1 - t.data_offsets.0)
            .sum();
        assert_eq!(covered, data_bytes);
    }
});
