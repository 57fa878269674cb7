//! The limits file (`--config`, a ConfigMap's gpumem.toml): a policy, or
//! an error that names the file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = std::path::Path::new("/etc/gpumem.toml");
    if let Err(e) = gpumem::limits::policy::config::parse(path, text) {
        assert!(e.to_string().contains("/etc/gpumem.toml"), "{e}");
    }
});
