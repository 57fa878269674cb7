//! `cargo xtask setup`: make this machine able to build and test gpumem.
//!
//! - the nightly toolchain with `rust-src` (the eBPF crate builds core);
//! - `bpf-linker` built against the nightly's own libLLVM (no system LLVM
//!   is needed: the `llvm-NN` feature is read off the library's name);
//! - a Python venv with NVIDIA's `cuda-bindings` for the tests (`venv`,
//!   which `cargo xtask deploy-check` uses for its own venv too).
//!
//! Each step checks first and does nothing when its result is present, so
//! the whole takes well under a second on a set-up machine.
use std::{fs, path::PathBuf};

use anyhow::{bail, Context};

use crate::util::{cache_dir, cargo_bin, cmd, output, run};

/// The bpf-linker release line built here (0.13 supports LLVM 22).
const BPF_LINKER_VERSION: &str = "~0.13";
/// Pinned: the version checked against the simulated driver.
pub const CUDA_BINDINGS: &str = "cuda-bindings==13.5.0";
/// The real clients the e2e tests run on the simulated driver, pinned to
/// the versions checked against it: numba-cuda (with numba, llvmlite and
/// numpy; it asks NVIDIA's CUDA runtime package for its version) and
/// cuda.core.
pub const FRAMEWORKS: &[&str] = &[
    "numba-cuda==0.30.4",
    "numba==0.68.1",
    "llvmlite==0.50.0",
    "numpy==2.4.6",
    "nvidia-cuda-runtime==13.5.37",
    "cuda-core==1.2.2",
    "cuda-pathfinder==1.9.1",
];

pub struct Setup {
    pub python: PathBuf,
}

pub fn setup() -> anyhow::Result<Setup> {
    let sysroot = nightly_sysroot()?;
    ensure_rust_src(&sysroot)?;
    ensure_bpf_linker(&sysroot)?;
    let python = ensure_venv()?;
    Ok(Setup { python })
}

pub fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    let probe = || output(cmd("rustc").args(["+nightly", "--print", "sysroot"]));
    let sysroot = match probe() {
        Ok(s) => s,
        Err(_) => {
            eprintln!("xtask: installing the nightly toolchain (the eBPF crate needs it)");
            run(cmd("rustup").args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
                "--component",
                "rust-src",
            ]))
            .context("installing the nightly toolchain with rustup")?;
            probe()?
        }
    };
    Ok(PathBuf::from(sysroot.trim()))
}

fn ensure_rust_src(sysroot: &std::path::Path) -> anyhow::Result<()> {
    if sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml").exists() {
        return Ok(());
    }
    eprintln!("xtask: adding rust-src to the nightly toolchain");
    run(cmd("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

/// The nightly's libLLVM file name, e.g. `libLLVM.so.22.1-rust-1.97.0-nightly`,
/// and its major version.
pub fn nightly_llvm(sysroot: &std::path::Path) -> anyhow::Result<(String, u32)> {
    let lib = sysroot.join("lib");
    let mut names: Vec<String> = fs::read_dir(&lib)
        .with_context(|| format!("reading {}", lib.display()))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("libLLVM.so.") || (n.starts_with("libLLVM-") && n.ends_with(".so")))
        .collect();
    names.sort();
    let name = names.into_iter().find(|n| n.starts_with("libLLVM.so.")).with_context(|| {
        format!("no libLLVM.so.* in {}: is the nightly toolchain complete?", lib.display())
    })?;
    let major = name
        .trim_start_matches("libLLVM.so.")
        .split(['.', '-'])
        .next()
        .and_then(|m| m.parse().ok())
        .with_context(|| format!("cannot read the LLVM major version from {name}"))?;
    Ok((name, major))
}

fn ensure_bpf_linker(sysroot: &std::path::Path) -> anyhow::Result<()> {
    let (llvm, major) = nightly_llvm(sysroot)?;
    let marker = cache_dir().join("bpf-linker.llvm");
    let linker = cargo_bin().join("bpf-linker");
    if linker.exists() && fs::read_to_string(&marker).is_ok_and(|m| m.trim() == llvm) {
        return Ok(());
    }
    eprintln!("xtask: building bpf-linker against {llvm} (about a minute, once)");
    let prefix = cache_dir().join("llvm-prefix");
    let prefix_lib = prefix.join("lib");
    let _ = fs::remove_dir_all(&prefix);
    fs::create_dir_all(&prefix_lib)?;
    let real = sysroot.join("lib").join(&llvm);
    for link in [llvm.as_str(), "libLLVM.so"] {
        std::os::unix::fs::symlink(&real, prefix_lib.join(link))
            .with_context(|| format!("linking {} into {}", real.display(), prefix_lib.display()))?;
    }
    run(cmd("cargo")
        .args(["install", "--force", "bpf-linker", "--version", BPF_LINKER_VERSION, "--no-default-features"])
        .args(["--features", &format!("llvm-{major}")])
        .env("LLVM_PREFIX", &prefix))
    .context("building bpf-linker")?;
    fs::create_dir_all(cache_dir())?;
    fs::write(&marker, &llvm)?;
    Ok(())
}

/// A venv with cuda-bindings, numba-cuda and cuda.core, for the tests
/// that run real clients on the simulated driver.
fn ensure_venv() -> anyhow::Result<PathBuf> {
    let wanted: Vec<&str> = std::iter::once(CUDA_BINDINGS).chain(FRAMEWORKS.iter().copied()).collect();
    venv("venv", &wanted).map(|dir| dir.join("bin/python"))
}

/// A Python venv `~/.cache/gpumem/NAME` with exactly `requirements`
/// (pinned pip specifiers) installed from PyPI; made again only when they
/// change. Returns its directory.
pub fn venv(name: &str, requirements: &[&str]) -> anyhow::Result<PathBuf> {
    let venv = cache_dir().join(name);
    let python = venv.join("bin/python");
    let marker = venv.join(".gpumem-requirements");
    let wanted = requirements.join("\n");
    if python.exists() && fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(venv);
    }
    eprintln!("xtask: creating {} with {}", venv.display(), requirements.join(", "));
    let _ = fs::remove_dir_all(&venv);
    let host_python = ["python3", "python"]
        .into_iter()
        .find(|p| cmd(p).arg("--version").output().is_ok_and(|o| o.status.success()));
    let Some(host_python) = host_python else {
        bail!("no python3 found to make the venv {}: install python3 (with its venv module)", venv.display())
    };
    run(cmd(host_python).arg("-m").arg("venv").arg(&venv))
        .with_context(|| format!("creating the venv {}", venv.display()))?;
    run(cmd(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(requirements))
    .with_context(|| format!("installing {} from PyPI into {}", requirements.join(", "), venv.display()))?;
    fs::write(&marker, wanted)?;
    Ok(venv)
}
