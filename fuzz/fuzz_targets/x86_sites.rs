//! A driver function's first bytes (any library a process maps can be
//! attached): the probe site chosen in them, and the `ret` after it.
#![no_main]
use gpumem::bpf::site::{choose, ret_after, Emulation, WINDOW};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, code)) = data.split_first() else { return };
    let kernel = Emulation { push: flags & 1 != 0, long_nops: flags & 2 != 0 };
    let site = choose(code, kernel);
    assert!(site.offset == 0 || (site.offset as usize) < code.len().min(WINDOW), "{site:?}");
    if let Some(ret) = ret_after(code, site.offset as usize) {
        // The `ret`'s first byte (a prefix, if it has one), after the site.
        assert!(ret >= site.offset && (ret as usize) < code.len(), "{site:?} {ret}");
    }
});
