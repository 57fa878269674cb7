//! What a workload declares in its environment (`GPUMEM_LIMIT`, HAMi's
//! `CUDA_DEVICE_MEMORY_LIMIT[_i]`, `GPU_MEMORY_LIMIT`, ...): the values'
//! parsers, which the kernel's programs run too (gpumem_common::declare).
#![no_main]
use gpumem_common::declare::{action, hami, mib, rule, signal, size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rule::parse(data);
    if let Ok(bytes) = size::parse(data).0 {
        assert!(bytes > 0, "{data:?}");
    }
    let _ = signal::parse(data);
    let _ = action::parse(data);
    let _ = hami::parse(data);
    let _ = mib::parse(data);
});
