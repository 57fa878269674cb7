//! `cargo xtask lint`: formatting and clippy with warnings denied, for the
//! user-space crates and for the eBPF crate (on its own target, with the
//! flags `gpumem-user/build.rs` builds it with).
use anyhow::Context;

use crate::util::{cmd, host_crate_args, root, run, target_dir};

pub fn lint() -> anyhow::Result<()> {
    crate::setup::setup()?;
    run(cmd("cargo").current_dir(root()).args(["fmt", "--all", "--check"]))
        .context("formatting differs: run `cargo fmt --all`")?;
    run(cmd("cargo").current_dir(root()).args(["clippy", "-q"]).args(host_crate_args()).args([
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
    .context("clippy on the user-space crates")?;
    run(cmd("cargo")
        .current_dir(root())
        .args([
            "+nightly",
            "clippy",
            "-q",
            "-p",
            "gpumem-ebpf",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(target_dir().join("ebpf-clippy"))
        .args(["--", "-D", "warnings"])
        .env("CARGO_ENCODED_RUSTFLAGS", "--cfg=bpf_target_arch=\"x86_64\"\x1f-Ctarget-cpu=v3"))
    .context("clippy on the eBPF crate")
}
