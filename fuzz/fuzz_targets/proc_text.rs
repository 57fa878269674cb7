//! What the agent reads of /proc and the cgroup tree: a `stat` line's
//! state, a cgroup path's container, a `maps` text's driver libraries.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for path in gpumem::bpf::discover::library_paths(data) {
        assert!(!path.is_empty());
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = gpumem::health::gone::state(text);
    if let Some(c) = gpumem::enrich::container::parse(text) {
        assert!(text.contains(&c.id), "{text:?}: {c:?}");
    }
});
