//! `cargo xtask lint`: formatting and clippy with warnings denied, for the
//! user-space crates and for the eBPF crate (on its own target, with the
//! flags `gpumem-user/build.rs` builds it with); then the structure: no
//! source file over 400 lines (`sizes`), no import cycle between the
//! modules of any crate (`cycles`).
mod cycles;
mod sizes;

use anyhow::{bail, Context};

use crate::util::{cmd, host_crate_args, root, run, target_dir};

/// Every crate root: (its source directory, relative to the workspace,
/// and its root file).
const CRATE_ROOTS: &[(&str, &str)] = &[
    ("gpumem-common/src", "lib.rs"),
    ("gpumem-ebpf/src", "main.rs"),
    ("gpumem-user/src", "lib.rs"),
    ("gpumem-user/src", "main.rs"),
    ("xtask/src", "main.rs"),
    ("tests/src", "lib.rs"),
    ("tests/src/bin", "gpumem-workload.rs"),
    ("tests/tests/e2e", "main.rs"),
    ("tests/simcuda/src", "lib.rs"),
];

/// Files over the size limit and import cycles, said all at once.
pub fn structure() -> anyhow::Result<()> {
    let root = root();
    let mut problems = Vec::new();
    for (path, lines) in sizes::too_long(&root)? {
        let path = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        problems.push(format!(
            "{path} has {lines} lines (at most {}): split it by responsibility",
            sizes::MAX_LINES
        ));
    }
    for (src, file) in CRATE_ROOTS {
        let krate =
            cycles::Crate::read(&root.join(src), file).with_context(|| format!("reading {src}/{file}"))?;
        for cycle in krate.cycles()? {
            problems.push(format!("{src}/{file}: modules {} import each other", cycle.join(" <-> ")));
        }
    }
    if !problems.is_empty() {
        bail!("the code's structure:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

pub fn lint() -> anyhow::Result<()> {
    crate::setup::setup()?;
    structure()?;
    run(cmd("cargo").current_dir(root()).args(["fmt", "--all", "--check"]))
        .context("formatting differs: run `cargo fmt --all`")?;
    run(cmd("cargo").current_dir(root()).args(["clippy", "-q"]).args(host_crate_args()).args([
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
    .context("clippy on the user-space crates")?;
    // The eBPF crate, as both objects are built: plain and with `--bpf-log`'s logging.
    for features in [&[][..], &["--features", "log"]] {
        run(cmd("cargo")
            .current_dir(root())
            .args(["+nightly", "clippy", "-q", "-p", "gpumem-ebpf", "--target", "bpfel-unknown-none"])
            .args(["-Z", "build-std=core"])
            .args(features)
            .arg("--target-dir")
            .arg(target_dir().join("ebpf-clippy"))
            .args(["--", "-D", "warnings"])
            .env("CARGO_ENCODED_RUSTFLAGS", "--cfg=bpf_target_arch=\"x86_64\"\x1f-Ctarget-cpu=v3"))
        .with_context(|| format!("clippy on the eBPF crate {features:?}"))?;
    }
    Ok(())
}
