//! Builds the eBPF object (crate `gpumem-ebpf`) twice and leaves both in
//! OUT_DIR for `include_bytes_aligned!`: `gpumem`, and `gpumem-log` with the
//! `log` feature, the one `gpumem run --bpf-log` loads (see gpumem-ebpf's
//! base/log.rs).
//!
//! This does what aya-build does (nightly cargo, `-Z build-std=core`, the
//! bpfel target, BTF) plus `-C target-cpu=v3`: the in-kernel accounting uses
//! BPF compare-exchange, which LLVM emits only for v3,
//! and aya-build 0.2 fixes the eBPF crate's rustflags with no way to add one.
//!
//! `AYA_BUILD_SKIP=1`, or no bpf-linker on PATH (a machine that never ran
//! `cargo xtask setup`), leaves an empty object: the agent builds, its unit
//! tests run, and `gpumem run` says how to get a working build.
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

const TARGET: &str = "bpfel-unknown-none";

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let outputs = [(out_dir.join("gpumem"), None), (out_dir.join("gpumem-log"), Some("log"))];
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest.parent().context("gpumem-user has a parent directory")?.to_path_buf();
    for watched in ["gpumem-ebpf/src", "gpumem-ebpf/Cargo.toml", "gpumem-common/src"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    // Compiled into the object: another note, another build (see
    // gpumem-ebpf's BUILD_NOTE).
    println!("cargo:rerun-if-env-changed=GPUMEM_BUILD_NOTE");
    println!("cargo:rerun-if-env-changed=PATH");

    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let linker = env::var_os("PATH")
        .and_then(|p| env::split_paths(&p).map(|d| d.join("bpf-linker")).find(|l| l.is_file()));
    let Some(linker) = linker.filter(|_| !skip) else {
        println!(
            "cargo:warning=building gpumem without its eBPF object ({}); run `cargo xtask build` for a working agent",
            if skip { "AYA_BUILD_SKIP set" } else { "bpf-linker not on PATH" }
        );
        for (out, _) in &outputs {
            fs::write(out, b"")?;
        }
        return Ok(());
    };
    println!("cargo:rerun-if-changed={}", linker.display());

    for (out, feature) in &outputs {
        // A target directory per feature set, so neither rebuilds the other.
        let target_dir = out_dir.join(if feature.is_some() { "ebpf-target-log" } else { "ebpf-target" });
        build_object(&workspace, &target_dir, *feature, out)?;
    }
    Ok(())
}

/// Builds gpumem-ebpf (with `feature`, if any) in `target_dir` and copies
/// the object to `out`.
fn build_object(
    workspace: &Path,
    target_dir: &Path,
    feature: Option<&str>,
    out: &Path,
) -> anyhow::Result<()> {
    // memset/memcpy expanded inline by LLVM, never called: kernels before
    // about 6.6 reject the calls to the exported helpers (global functions
    // taking pointers: "reg type unsupported for arg#0"); with the helpers
    // not exported, a call LLVM could not expand fails the link here.
    let rustflags = [
        "--cfg=bpf_target_arch=\"x86_64\"",
        "-Cdebuginfo=2",
        "-Clink-arg=--btf",
        "-Clink-arg=--disable-expand-memcpy-in-order",
        "-Clink-arg=--disable-memory-builtins",
        "-Ctarget-cpu=v3",
    ];
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "build", "--package", "gpumem-ebpf", "--bins", "--release"])
        .args(["--target", TARGET, "-Z", "build-std=core", "--target-dir"])
        .arg(target_dir)
        .current_dir(workspace)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        // The outer build's compiler settings must not leak into the nightly one.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_TARGET_DIR");
    if let Some(f) = feature {
        cmd.args(["--features", f]);
    }
    let status = cmd.status().with_context(|| format!("running {cmd:?} (is rustup installed?)"))?;
    if !status.success() {
        bail!("building the eBPF object failed ({status}); run `cargo xtask setup` and see the errors above");
    }
    let built = target_dir.join(TARGET).join("release").join("gpumem");
    fs::copy(&built, out).with_context(|| format!("copying {} to {}", built.display(), out.display()))?;
    Ok(())
}
