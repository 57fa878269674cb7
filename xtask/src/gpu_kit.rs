//! `cargo xtask gpu-kit`: a self-contained bundle for a machine with an
//! NVIDIA GPU (no network or Rust there): the release agent, stripped, and
//! `tests/gpukit`'s scripts, under `target/gpu-kit`.
use std::{fs, path::Path};

use anyhow::{bail, Context};

use crate::{
    artifacts::build_profile,
    util::{cmd, ensure_tool, root, run, target_dir},
};

/// What a device machine accepts from this workplace in one transfer.
const MOST_BYTES: u64 = 64 << 20;

pub fn gpu_kit() -> anyhow::Result<()> {
    let built = build_profile("release")?;
    let kit = target_dir().join("gpu-kit");
    if kit.exists() {
        fs::remove_dir_all(&kit).with_context(|| format!("clearing {}", kit.display()))?;
    }
    copy_tree(&root().join("tests/gpukit"), &kit)?;
    let agent = kit.join("gpumem");
    fs::copy(&built.agent, &agent).with_context(|| format!("copying {}", built.agent.display()))?;
    let strip = ensure_tool("strip", "binutils")?;
    run(cmd(strip).arg("--strip-debug").arg(&agent))?;
    let bytes = tree_bytes(&kit)?;
    if bytes > MOST_BYTES {
        bail!("the kit is {bytes} bytes, over the {MOST_BYTES} a device machine takes: leave something out");
    }
    println!(
        "{} ({:.1} MiB): copy it to the GPU machine and run ./run.sh there as root",
        kit.display(),
        bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// Copies `from` into `to`, leaving out Python's caches and earlier outputs.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "__pycache__" || name == "out" {
            continue;
        }
        let dest = to.join(&name);
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else {
            fs::copy(entry.path(), &dest).with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

fn tree_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        total +=
            if entry.file_type()?.is_dir() { tree_bytes(&entry.path())? } else { entry.metadata()?.len() };
    }
    Ok(total)
}
