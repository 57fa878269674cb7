//! The command line's and the control socket's limit texts: `--limit`,
//! `--default-action`, sizes, `--env-limits`, `--env-max`, targets.
#![no_main]
use gpumem::limits::policy::{env, size, spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = spec::Limit::parse(text);
    let _ = spec::Action::parse(text);
    let _ = spec::parse_target(text);
    let _ = spec::parse_signal(text);
    let _ = env::parse_env_limits(text);
    let _ = env::parse_env_max(text);
    if let Ok(bytes) = size::parse_size(text) {
        assert!(bytes > 0, "{text:?}");
    }
    if let Ok(bytes) = size::parse_ring_size(text) {
        assert!(bytes.is_power_of_two(), "{text:?}");
    }
});
