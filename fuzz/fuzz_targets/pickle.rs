//! Any bytes as a torch file's pickle: a result, never a panic, a hang or
//! an allocation of what the bytes claim; nothing is called (the machine
//! has nothing to call); what is listed is consistent (a stride per axis,
//! every global classed).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weightscope::checkpoint::pytorch;

fuzz_target!(|data: &[u8]| {
    let _ = pytorch::pickle::unpickle(data, pytorch::pickle::Persistent::Legacy);
    if let Ok((tensors, globals)) = pytorch::pickle_tensors(data) {
        for t in &tensors {
            assert_eq!(t.shape.len(), t.stride.len(), "{}", t.name);
            let _ = t.reach();
            let _ = t.contiguous();
        }
        for g in &globals {
            assert_eq!(pytorch::verdict::classify(&g.global), g.safety);
        }
    }
});
