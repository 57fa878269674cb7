//! NVIDIA's own driver library, `libcuda.so.1` from Debian's non-free
//! `libcuda1` packages: the code users run, for the tests and the bench to
//! attach to (no GPU is needed: without one its calls fail with a CUresult,
//! through the same entry stubs), and NVIDIA's management library of the
//! same driver beside it (`libnvidia-ml.so.1` from `libnvidia-ml1`: without
//! a driver loaded, `nvmlInit` fails, and the agent must say so and carry
//! on). Fetched once into `~/.cache/gpumem/nvidia/SERIES/`.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

use crate::{
    apt::{version_key, Apt},
    util::{cache_dir, run},
};

/// Driver series and the Debian suite whose non-free component carries
/// it: the newest release of each is used; the last is the newest series
/// any Debian suite carries (experimental's), which the kernel matrix
/// proves `deny` on.
const SERIES: &[(&str, &str)] = &[("535", "bookworm"), ("550", "trixie"), ("555", "experimental")];

/// NVIDIA's management library's file name, kept beside `libcuda.so.1`.
pub const NVML: &str = "libnvidia-ml.so.1";

/// One of NVIDIA's driver libraries, unpacked.
pub struct Library {
    /// The driver's version, e.g. `550.163.01`.
    pub version: String,
    /// Its `libcuda.so.1`.
    pub path: PathBuf,
}

/// Every series of [`SERIES`], from the cache or fetched into it.
pub fn libraries() -> anyhow::Result<Vec<Library>> {
    let root = cache_dir().join("nvidia");
    let cached = |series: &str| -> Option<Library> {
        let dir = root.join(series);
        let version = fs::read_to_string(dir.join("version")).ok()?.trim().to_string();
        let path = dir.join("libcuda.so.1");
        (path.exists() && dir.join(NVML).exists()).then_some(Library { version, path })
    };
    if let Some(all) = SERIES.iter().map(|(s, _)| cached(s)).collect::<Option<Vec<_>>>() {
        return Ok(all);
    }
    let sources: Vec<(&str, &str)> = SERIES.iter().map(|(_, suite)| (*suite, "non-free")).collect();
    let apt = Apt::new("apt-nvidia", &sources)?;
    apt.update()?;
    let offered = apt.versions("libcuda1")?;
    let mut out = Vec::new();
    for (series, suite) in SERIES {
        if let Some(l) = cached(series) {
            out.push(l);
            continue;
        }
        let Some(version) = offered
            .iter()
            .filter(|(v, s)| s == suite && v.starts_with(&format!("{series}.")))
            .map(|(v, _)| v.clone())
            .max_by_key(|v| version_key(v))
        else {
            bail!("Debian's {suite} non-free offers no libcuda1 {series}.x (offered: {offered:?})");
        };
        eprintln!("xtask: fetching NVIDIA's libcuda1 {version} from {suite} non-free");
        out.push(unpack(&apt, &version, &root.join(series))?);
    }
    Ok(out)
}

/// Downloads `libcuda1=VERSION` and `libnvidia-ml1=VERSION` and keeps
/// their libraries as `DIR/libcuda.so.1` and `DIR/libnvidia-ml.so.1`, with
/// the driver's version beside them.
fn unpack(apt: &Apt, version: &str, dir: &Path) -> anyhow::Result<Library> {
    let _ = fs::remove_dir_all(dir);
    let work = dir.join("deb");
    fs::create_dir_all(&work)?;
    // The package's version carries a Debian revision (550.163.01-2); the
    // libraries are named for the driver's (libcuda.so.550.163.01).
    let driver = version.split('-').next().unwrap_or(version);
    for (package, stem, name) in
        [("libcuda1", "libcuda.so", "libcuda.so.1"), ("libnvidia-ml1", "libnvidia-ml.so", NVML)]
    {
        let deb = apt.download(&format!("{package}={version}"), &work)?;
        let tree = work.join(package);
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree))?;
        let lib = find(&tree, &format!("{stem}.{driver}"))?
            .with_context(|| format!("{package} {version} holds no {stem}.{driver}"))?;
        fs::rename(&lib, dir.join(name))?;
    }
    fs::remove_dir_all(&work)?;
    fs::write(dir.join("version"), driver)?;
    Ok(Library { version: driver.to_string(), path: dir.join("libcuda.so.1") })
}

/// The regular file named `name` under `dir`, searched depth first.
fn find(dir: &Path, name: &str) -> anyhow::Result<Option<PathBuf>> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            if let Some(p) = find(&e.path(), name)? {
                return Ok(Some(p));
            }
        } else if t.is_file() && e.file_name() == name {
            return Ok(Some(e.path()));
        }
    }
    Ok(None)
}

/// The libraries' paths joined with `:`, as the end-to-end tests read them
/// from `GPUMEM_NVIDIA_LIBCUDA`.
pub fn path_list(libraries: &[Library]) -> std::ffi::OsString {
    std::env::join_paths(libraries.iter().map(|l| &l.path)).unwrap_or_default()
}

/// `cargo xtask nvidia`: each library's version and path.
pub fn print() -> anyhow::Result<()> {
    for l in libraries()? {
        println!("{} {}", l.version, l.path.display());
    }
    Ok(())
}
