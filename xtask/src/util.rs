//! Small helpers: paths, running commands with clear errors.
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

/// The host-built crates (the eBPF crate builds only for the bpf target).
pub const HOST_CRATES: [&str; 7] =
    ["gpumem-common", "gpumem-user", "simcard", "simcuda", "simnvml", "xtask", "gpumem-tests"];

/// `-p CRATE` for each of [`HOST_CRATES`].
pub fn host_crate_args() -> Vec<&'static str> {
    HOST_CRATES.iter().flat_map(|c| ["-p", c]).collect()
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

pub fn home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"))
}

/// Where set-up keeps what it builds outside the repository.
pub fn cache_dir() -> PathBuf {
    home().join(".cache/gpumem")
}

pub fn cargo_bin() -> PathBuf {
    std::env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| home().join(".cargo")).join("bin")
}

/// PATH with cargo's bin directory first (where bpf-linker is installed),
/// for every child command.
pub fn path_env() -> OsString {
    let mut dirs = vec![cargo_bin()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH entries are joinable")
}

/// A command with the project's PATH.
pub fn cmd(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env("PATH", path_env());
    c
}

/// Runs `c`, failing with the command line when it does not succeed.
pub fn run(c: &mut Command) -> anyhow::Result<()> {
    let status = c.status().with_context(|| format!("starting {c:?}"))?;
    if !status.success() {
        bail!("{c:?} failed: {status}");
    }
    Ok(())
}

/// Runs `c` and returns its stdout, failing with its stderr.
pub fn output(c: &mut Command) -> anyhow::Result<String> {
    let out = c.output().with_context(|| format!("starting {c:?}"))?;
    if !out.status.success() {
        bail!("{c:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Sends SIGINT to a child, as Ctrl-C would (a child already gone is no
/// error).
pub fn interrupt(pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGINT);
}

/// Where `program` is on the project's PATH, if it is.
pub fn which(program: &str) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    ::which::which_in(program, Some(path_env()), cwd).ok()
}

/// `program`, installing Debian's `package` first if it is not on PATH.
pub fn ensure_tool(program: &str, package: &str) -> anyhow::Result<PathBuf> {
    if let Some(p) = which(program) {
        return Ok(p);
    }
    eprintln!("xtask: installing {package} (Debian package) for {program}");
    let _ = run(Command::new("apt-get").args(["update", "-qq"]));
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends", package])
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .with_context(|| format!("installing {package} (needs root and Debian's package mirror)"))?;
    which(program).with_context(|| format!("{program} is not on PATH after installing {package}"))
}

/// Where this host mounts the cgroup2 hierarchy.
pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let mounts = procfs::process::Process::myself()?.mountinfo()?;
    mounts
        .iter()
        .find(|m| m.fs_type == "cgroup2")
        .map(|m| m.mount_point.clone())
        .context("this host has no cgroup2 mount")
}
