//! `cargo xtask build` and `build-and-run`.
use std::{fs, path::PathBuf};

use anyhow::{bail, Context};

use crate::{
    setup::{setup, Setup},
    util::{cmd, root, run, target_dir},
};

pub struct Built {
    pub setup: Setup,
    pub agent: PathBuf,
    pub libcuda: PathBuf,
    pub workload: PathBuf,
    /// The C client whose first CUDA allocation follows its exec
    /// (`tests/clients/first_alloc.c`).
    pub first_alloc: PathBuf,
}

pub fn build() -> anyhow::Result<Built> {
    build_profile("debug")
}

/// Builds everything in Cargo profile `profile` (`debug`, `release`, or a
/// custom one such as the matrix's), its outputs in `target/<profile>`.
pub fn build_profile(profile: &str) -> anyhow::Result<Built> {
    let setup = setup()?;
    let mut c = cmd("cargo");
    c.current_dir(root()).args([
        "build",
        "-p",
        "gpumem-user",
        "-p",
        "simcuda",
        "-p",
        "simnvml",
        "-p",
        "gpumem-tests",
        "--bins",
        "--lib",
    ]);
    c.args(profile_args(profile));
    run(&mut c).context("building gpumem")?;
    let target = target_dir();
    let dir = target.join(profile);
    let agent = dir.join("gpumem");
    // An empty object means build.rs found no bpf-linker: say so now, not
    // at the first `gpumem run`.
    let objects = dir.join("build");
    let empty = fs::read_dir(&objects)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gpumem-user-"))
        .map(|e| e.path().join("out/gpumem"))
        .filter_map(|p| fs::metadata(&p).ok().map(|m| (m.modified().ok(), m.len())))
        .max_by_key(|(t, _)| *t)
        .is_some_and(|(_, len)| len == 0);
    if empty {
        bail!("the agent was built without its eBPF object (bpf-linker not found); see the warnings above");
    }
    // Tests and the demo use target/simcuda; the bench its own copy.
    let sim_dir = match profile {
        "debug" => target.join("simcuda"),
        "release" => target.join("bench"),
        _ => dir.join("simcuda"),
    };
    let libcuda = install(&dir.join("libsimcuda.so"), &sim_dir, "libcuda.so.1")?;
    // The simulated NVML beside it, as a driver's directory holds both.
    install(&dir.join("libsimnvml.so"), &sim_dir, "libnvidia-ml.so.1")?;
    let first_alloc = compile_c(&root().join("tests/clients/first_alloc.c"), &dir.join("first-alloc"))?;
    Ok(Built { setup, agent, libcuda, workload: dir.join("gpumem-workload"), first_alloc })
}

/// Compiles one C test client (`gcc`, as every machine of this kind has)
/// into `out`, unless `out` is newer than its source.
fn compile_c(source: &std::path::Path, out: &std::path::Path) -> anyhow::Result<PathBuf> {
    let modified = |p: &std::path::Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(out).is_some_and(|o| modified(source).is_some_and(|s| o >= s)) {
        return Ok(out.to_path_buf());
    }
    let mut c = crate::util::ensure_tool("gcc", "gcc").map(cmd)?;
    c.args(["-O2", "-Wall", "-Werror", "-o"]).arg(out).arg(source).arg("-ldl");
    run(&mut c).with_context(|| format!("compiling {}", source.display()))?;
    Ok(out.to_path_buf())
}

/// Cargo's arguments that select `profile` (none for `debug`, the
/// default).
pub fn profile_args(profile: &str) -> Vec<String> {
    match profile {
        "debug" => Vec::new(),
        other => vec!["--profile".to_string(), other.to_string()],
    }
}

/// Puts a simulated library where tests and the demo expect it, under the
/// real library's file name. Replaced by rename, so a process that has the
/// old one mapped keeps a consistent file.
fn install(built: &std::path::Path, dir: &std::path::Path, name: &str) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let dest = dir.join(name);
    if fs::read(&dest).ok() == Some(fs::read(built).with_context(|| format!("reading {}", built.display()))?)
    {
        return Ok(dest);
    }
    let tmp = dir.join(format!(".{name}.new"));
    fs::copy(built, &tmp)?;
    fs::rename(&tmp, &dest)?;
    Ok(dest)
}

pub fn build_and_run(args: &[String]) -> anyhow::Result<()> {
    let built = build()?;
    run(cmd(&built.agent).arg("run").args(args))
}
