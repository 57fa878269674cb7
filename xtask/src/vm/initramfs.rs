//! The initramfs every VM boots: busybox, the agent, the simulated driver,
//! the workload generator and the end-to-end test binaries, with the
//! shared libraries they link against, and `init.sh` as /init.
use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

use crate::util::{output, run};

/// Where the artifacts sit inside the guest: the tests find them through
/// `CARGO_TARGET_DIR=/t`, as they do in the checkout.
pub const GUEST_TARGET: &str = "t";

/// What goes in: (host file, path inside the guest), and whole trees.
pub struct Contents {
    pub files: Vec<(PathBuf, String)>,
    pub trees: Vec<Tree>,
}

/// A directory copied as it is (links kept), less `left_out` (paths
/// relative to it; GNU tar's wildcards, whose `*` also matches `/`, so
/// `lib/python3.*/test` leaves out every `test` directory below too), to
/// `guest`.
pub struct Tree {
    pub host: PathBuf,
    pub guest: String,
    pub left_out: &'static [&'static str],
}

/// The shared libraries `elf` loads (its interpreter included), by `ldd`.
fn libraries(elf: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let text = match output(Command::new("ldd").arg(elf)) {
        Ok(t) => t,
        // A static executable: ldd says so and fails.
        Err(e) if format!("{e:#}").contains("not a dynamic executable") => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => l.split_whitespace().next().filter(|p| p.starts_with('/')),
            }
        })
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .collect())
}

/// Builds `out` (a gzip'd newc cpio archive) from `contents`, staging in
/// `stage`, with `init` as /init and `texts` (guest path, contents) as
/// files. Executables are copied without debug information.
pub fn build(
    contents: &Contents,
    init: &str,
    texts: &[(&str, &str)],
    stage: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let _ = fs::remove_dir_all(stage);
    for d in ["bin", "proc", "sys", "dev", "tmp", "root", "tests", "etc"] {
        fs::create_dir_all(stage.join(d))?;
    }
    let mut libs = Vec::new();
    for (host, guest) in &contents.files {
        let dest = stage.join(guest.trim_start_matches('/'));
        fs::create_dir_all(dest.parent().expect("guest paths have a directory"))?;
        run(Command::new("objcopy").arg("--strip-debug").arg(host).arg(&dest))
            .with_context(|| format!("copying {} into the initramfs", host.display()))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o755))?;
        libs.extend(libraries(host)?);
    }
    for tree in &contents.trees {
        libs.extend(copy_tree(tree, stage)?);
    }
    libs.sort();
    libs.dedup();
    for lib in libs {
        let dest = stage.join(lib.strip_prefix("/").unwrap_or(&lib));
        fs::create_dir_all(dest.parent().expect("libraries live in a directory"))?;
        // Follow symlinks: the guest gets the file under the linked name.
        fs::copy(&lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
    }
    for (guest, text) in texts {
        fs::write(stage.join(guest), text)?;
    }
    let init_path = stage.join("init");
    fs::write(&init_path, init)?;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755))?;
    let script = format!(
        "cd {} && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 > {}",
        shell_quote(stage),
        shell_quote(out)
    );
    run(Command::new("sh").args(["-c", &script])).context("packing the initramfs")?;
    if fs::metadata(out)?.len() == 0 {
        bail!("the initramfs {} came out empty", out.display());
    }
    Ok(())
}

/// Copies `tree` under `stage`; returns the shared libraries its shared
/// objects load from outside it.
fn copy_tree(tree: &Tree, stage: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dest = stage.join(&tree.guest);
    fs::create_dir_all(&dest)?;
    let excludes: String =
        tree.left_out.iter().map(|p| format!(" --exclude='./{p}'")).collect::<Vec<_>>().join("");
    let script = format!(
        "tar -C {} --anchored{excludes} -cf - . | tar -C {} -xf -",
        shell_quote(&tree.host),
        shell_quote(&dest)
    );
    run(Command::new("sh").args(["-c", &script]))
        .with_context(|| format!("copying {} into the initramfs", tree.host.display()))?;
    let mut libs = Vec::new();
    let found = output(Command::new("find").arg(&dest).args(["-type", "f", "-name", "*.so*"]))?;
    for so in found.lines() {
        // Not every `.so` name is an ELF object ldd can read: skipped.
        if let Ok(more) = libraries(Path::new(so)) {
            libs.extend(more.into_iter().filter(|l| !l.starts_with(stage)));
        }
    }
    Ok(libs)
}

fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}
