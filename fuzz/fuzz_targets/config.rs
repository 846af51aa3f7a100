//! Any bytes as a config.json: a config or an error, never a panic; and the
//! quantization parameters it accepts never overflow when checked against
//! any packed shape (2^63 group sizes once wrapped into a false fit).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::parse_config;

fuzz_target!(|data: &[u8]| {
    let Ok(config) = parse_config(Path::new("config.json"), data) else {
        return;
    };
    let Some(quantization) = &config.quantization else {
        return;
    };
    // Shapes from the config's own bytes, the extremes and ordinary ones.
    let tail = data.len().saturating_sub(16);
    let word = |at: usize| {
        data.get(tail + at..tail + at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let shapes = [
        (word(0), word(8)),
        (u64::MAX, u64::MAX),
        (u64::MAX, 1),
        (1, u64::MAX),
        (512, 64),
        (0, 0),
    ];
    let all = std::iter::once(Some(quantization.default))
        .chain(quantization.overrides.values().copied());
    for params in all.flatten() {
        for (words, groups) in shapes {
            if params.fits(words, groups) {
                // A fit is exact arithmetic, checked another way in u128.
                let inputs = u128::from(words) * 32;
                assert_eq!(inputs % u128::from(params.bits), 0);
                assert_eq!(
                    inputs / u128::from(params.bits),
                    u128::from(groups) * u128::from(params.group_size)
                );
            }
        }
    }
});
