//! A record as the ring buffer hands it over: any bytes, as a hostile or
//! newer kernel object could write them. Decoded or refused, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = gpumem::decode::decode(data) {
        // What decodes is written as a line.
        let _ = format!("{event:?}");
    }
});
