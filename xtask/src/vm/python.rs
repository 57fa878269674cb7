//! Real Python clients in the VMs: the project venv (cuda-bindings,
//! numba-cuda, cuda.core) and the Python it was made from, each at its
//! host path (the venv's links and `pyvenv.cfg` name them), less what no
//! test imports; and the GPU kit's workloads at `/kit/workloads`.
use std::path::Path;

use anyhow::Context;

use super::initramfs::Tree;

/// Where the kit's workloads sit in the guest (`/init` names it in
/// `GPUMEM_KIT_WORKLOADS`).
const GUEST_WORKLOADS: &str = "kit/workloads";

/// Parts of the base Python no client imports (tests, GUIs, headers).
const BASE_LEFT_OUT: &[&str] = &[
    "include",
    "share",
    "lib/pkgconfig",
    "lib/python3.*/test",
    "lib/python3.*/idlelib",
    "lib/python3.*/tkinter",
    "lib/python3.*/turtledemo",
    "lib/python3.*/ensurepip",
    "lib/python3.*/lib2to3",
    "lib/python3.*/config-*",
    "lib/python3.*/site-packages",
    "lib/libpython*.a",
];

/// Installers in the venv, never run in the guest.
const VENV_LEFT_OUT: &[&str] = &[
    "lib/python3.*/site-packages/pip",
    "lib/python3.*/site-packages/setuptools",
    "lib/python3.*/site-packages/pkg_resources",
];

/// The trees that carry `python` (the venv's interpreter) and the kit's
/// workloads of the checkout at `root` into the guest.
pub fn trees(python: &Path, root: &Path) -> anyhow::Result<Vec<Tree>> {
    let venv = python.parent().and_then(Path::parent).context("the venv's python is not in VENV/bin")?;
    let cfg = venv.join("pyvenv.cfg");
    let text = std::fs::read_to_string(&cfg).with_context(|| format!("reading {}", cfg.display()))?;
    let home = text
        .lines()
        .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == "home").map(|(_, v)| v.trim()))
        .with_context(|| format!("{} names no `home`", cfg.display()))?;
    let base = Path::new(home).parent().context("the venv's home is not PREFIX/bin")?;
    if base == Path::new("/usr") || base == Path::new("/") {
        anyhow::bail!(
            "the venv {} was made from the system's Python ({home}): the VMs would need all of {}; make it \
             from a Python installed under a prefix of its own (pyenv, uv), then run `cargo xtask setup`",
            venv.display(),
            base.display()
        );
    }
    let at = |p: &Path| p.to_string_lossy().trim_start_matches('/').to_string();
    let workloads = root.join("tests/gpukit/workloads");
    Ok(vec![
        Tree { host: base.to_path_buf(), guest: at(base), left_out: BASE_LEFT_OUT },
        Tree { host: venv.to_path_buf(), guest: at(venv), left_out: VENV_LEFT_OUT },
        // Not at its host path: the guest's /tmp is a tmpfs over whatever
        // the initramfs has there (a checkout under /tmp, as CI's clone).
        Tree { host: workloads, guest: GUEST_WORKLOADS.into(), left_out: &["__pycache__"] },
    ])
}
