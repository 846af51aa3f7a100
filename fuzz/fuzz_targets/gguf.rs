//! Any bytes as a GGUF file's header: a result, never a panic or an
//! allocation of what a damaged header claims; what is accepted is
//! consistent (every tensor in the data section, whole blocks); reading
//! ahead (as local files are read) gives the same header or error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightscope_fuzz::checkpoint::gguf::GgufHeader;

fuzz_target!(|data: &[u8]| {
    let read_ahead = 1 + usize::from(data.first().copied().unwrap_or(0) % 64);
    assert!(weightscope_fuzz::checkpoint::gguf::read_ahead_agrees(
        data, read_ahead
    ));
    if let Ok(header) = GgufHeader::from_reader(std::io::Cursor::new(data)) {
        assert!(header.data_start >= header.header_bytes);
        assert!(header.data_start % header.alignment == 0);
        for t in &header.tensors {
            assert!(t.offset >= header.data_start, "{}", t.name);
            if let Some(kind) = t.ggml_type() {
                let values: u64 = t.shape.iter().product();
                assert_eq!(t.bytes, values / kind.block_values * kind.block_bytes);
            }
        }
        let _ = header.refused_by();
    }
});
