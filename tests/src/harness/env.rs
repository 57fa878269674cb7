//! Where a test runs: the built artifacts, the test's name, whether it may
//! load eBPF, what this kernel allows, scratch space.
use std::{io::Write, path::PathBuf, process::Command};

/// Built artifacts the tests run.
pub struct Paths {
    pub root: PathBuf,
    pub agent: PathBuf,
    pub libcuda: PathBuf,
    pub workload: PathBuf,
    /// The C client whose first CUDA allocation follows its exec.
    pub first_alloc: PathBuf,
    /// Runs a program as another user (`src/bin/as-user.rs`).
    pub as_user: PathBuf,
}

/// The agent and workload come from `target/<GPUMEM_BUILD_PROFILE>`
/// (`debug` when unset; `cargo xtask test` and the kernel matrix's guests
/// set the profile they were built in), the simulated driver from
/// `target/simcuda` (a debug build's) or from the profile's `simcuda`.
pub fn paths() -> Paths {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let name = std::env::var_os("GPUMEM_BUILD_PROFILE").unwrap_or_else(|| "debug".into());
    let profile = target.join(&name);
    let simcuda = if name == "debug" { target.join("simcuda") } else { profile.join("simcuda") };
    let p = Paths {
        agent: profile.join("gpumem"),
        libcuda: simcuda.join("libcuda.so.1"),
        workload: profile.join("gpumem-workload"),
        first_alloc: profile.join("first-alloc"),
        as_user: profile.join("as-user"),
        root,
    };
    for f in [&p.agent, &p.libcuda, &p.workload, &p.first_alloc, &p.as_user] {
        assert!(
            f.exists(),
            "{} is missing: run the tests with `cargo xtask test`, which builds it",
            f.display()
        );
    }
    p
}

/// The running test's name (libtest names each test's thread after it).
pub fn test_name() -> String {
    std::thread::current().name().unwrap_or("(unnamed test)").to_string()
}

/// True when the test can load eBPF; otherwise prints why it is skipped.
pub fn privileged() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip("needs root to load eBPF programs and attach uprobes; `cargo xtask test` runs it as root");
    false
}

/// Says on stdout, past libtest's capture (so it shows for a passing
/// test), that the running test did not run and why; `cargo xtask test`
/// counts these.
pub fn skip(why: &str) {
    let _ = writeln!(std::io::stdout().lock(), "SKIPPED {}: {why}", test_name());
}

/// What `cargo xtask test` provides in the environment variable `var`
/// (a tool's path, a venv's python, libraries); None, the test saying it
/// is skipped and that the variable is how `cargo xtask test` `provides`
/// it, when unset.
pub fn provided(var: &str, provides: &str) -> Option<std::ffi::OsString> {
    let value = std::env::var_os(var);
    if value.is_none() {
        skip(&format!("{var} is not set; `cargo xtask test` {provides}"));
    }
    value
}

/// Whether the tests run in the kernel matrix's guests, under QEMU's
/// emulation (`GPUMEM_EMULATED`, set by their /init), where everything
/// takes ten to fifty times as long as on the host: a test that repeats a
/// race check many times repeats it fewer times there.
pub fn emulated() -> bool {
    std::env::var_os("GPUMEM_EMULATED").is_some_and(|v| v == "1")
}

/// None when this kernel lets uprobe programs write registers (what the
/// deny action needs), else the reason `gpumem probe` gives.
pub fn register_write_refusal() -> Option<String> {
    capability_refusal("uprobe_register_writes")
}

/// None when this kernel has multi-uprobe links, else the reason `gpumem
/// probe` gives.
pub fn multi_link_refusal() -> Option<String> {
    capability_refusal("uprobe_multi")
}

/// None when this kernel lets uprobe programs write user memory (what
/// `view=limit` needs), else the reason `gpumem probe` gives.
pub fn user_write_refusal() -> Option<String> {
    capability_refusal("user_memory_writes")
}

/// None when `gpumem probe` says capability `name` is available, else its
/// reason.
fn capability_refusal(name: &str) -> Option<String> {
    let out = Command::new(paths().agent).args(["probe", "--json"]).output().expect("running gpumem probe");
    assert!(out.status.success(), "gpumem probe failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gpumem probe --json prints JSON");
    let caps = v["capabilities"].as_array().expect("a capability list");
    let cap = caps.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no capability {name}"));
    (cap["available"] != true).then(|| cap["reason"].as_str().unwrap_or("").to_string())
}

/// A scratch directory for one test, removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("gpumem-test-").tempdir().expect("a scratch directory")
}
