//! Any bytes as a torch file's pickle: a result, never a panic, a hang or
//! an allocation of what the bytes claim; nothing is called (the machine
//! has nothing to call); what is listed is consistent (a stride per axis,
//! every global classed) and bounded by what was read: names, axes and
//! globals together at most 10 times the input and a constant (a pickle
//! names a long key or a big shape from its memo for a byte or two each).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::pytorch;

fuzz_target!(|data: &[u8]| {
    let _ = pytorch::pickle::unpickle(data, pytorch::pickle::Persistent::Legacy);
    if let Ok((tensors, globals)) = pytorch::pickle_tensors(data) {
        let mut built = 0_usize;
        for t in &tensors {
            assert_eq!(t.shape.len(), t.stride.len(), "{}", t.name);
            assert!(t.name.len() <= pytorch::MAX_NAME_BYTES + 24, "{}", t.name.len());
            let _ = t.reach();
            let _ = t.contiguous();
            built += t.name.len() + 8 * (t.shape.len() + t.stride.len());
        }
        for g in &globals {
            assert_eq!(pytorch::verdict::classify(&g.global), g.safety);
            built += g.global.len();
        }
        assert!(
            built <= 10 * data.len() + (6 << 20),
            "{built} bytes listed from a pickle of {}",
            data.len()
        );
    }
});
