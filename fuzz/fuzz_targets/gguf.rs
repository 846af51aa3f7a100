//! Any bytes as a GGUF file's header: a result, never a panic or an
//! allocation of what a damaged header claims; what is accepted is
//! consistent (every tensor in the data section, whole blocks, counts that
//! do not wrap); reading
//! ahead (as local files are read) gives the same header or error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::gguf::GgufHeader;

fuzz_target!(|data: &[u8]| {
    let read_ahead = 1 + usize::from(data.first().copied().unwrap_or(0) % 64);
    assert!(weightscope::checkpoint::gguf::read_ahead_agrees(
        data, read_ahead
    ));
    if let Ok(header) = GgufHeader::from_reader(std::io::Cursor::new(data)) {
        assert!(header.data_start >= header.header_bytes);
        assert!(header.data_start % header.alignment == 0);
        for t in &header.tensors {
            assert!(t.offset >= header.data_start, "{}", t.name);
            if let Some(kind) = t.ggml_type() {
                // An accepted tensor's counts fit: its values, and its bytes
                // (an F32 of 2^62+1 values once "fit" in 4 bytes).
                let values = t
                    .shape
                    .iter()
                    .try_fold(1u64, |n, &d| n.checked_mul(d))
                    .expect("an accepted shape's value count fits in 64 bits");
                let bytes = (values / kind.block_values)
                    .checked_mul(kind.block_bytes)
                    .expect("an accepted tensor's byte count fits in 64 bits");
                assert_eq!(t.bytes, bytes);
            }
        }
        let _ = header.refused_by();
    }
});
