//! Finding the `libcuda.so*` files to attach to.
//!
//! Order: paths given with `--libcuda`; otherwise the ldconfig cache, the
//! usual install directories, and every `libcuda.so*` mapped by a running
//! process (reached through `/proc/PID/root`, so a container's own copy is
//! found too). Files are told apart by device and inode: one probe set per
//! distinct file, however many paths lead to it.
use std::{
    collections::HashSet,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Command,
};

use procfs::process::{MMapPath, MemoryMaps};

/// Directories where NVIDIA's installers and distributions put libcuda.
pub const SEARCH_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/cuda/compat",
    "/usr/lib/wsl/lib",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
];

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("--libcuda {path}")]
    Explicit { path: String, source: std::io::Error },
    #[error(
        "no libcuda.so* found: searched the ldconfig cache, {dirs} and the memory maps of running processes; \
         install the NVIDIA driver or pass --libcuda PATH"
    )]
    NotFound { dirs: String },
}

/// One library file to attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// A path that reaches the file from the agent's mount namespace.
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
}

/// Distinct files, by (device, inode).
#[derive(Debug, Default)]
pub struct LibrarySet {
    pub libs: Vec<Library>,
    seen: HashSet<(u64, u64)>,
}

impl LibrarySet {
    /// Adds `path` unless its file is already in the set; returns the new
    /// entry.
    pub fn add(&mut self, path: &Path) -> std::io::Result<Option<&Library>> {
        let meta = std::fs::metadata(path)?;
        if !self.seen.insert((meta.dev(), meta.ino())) {
            return Ok(None);
        }
        self.libs.push(Library { path: path.to_path_buf(), dev: meta.dev(), ino: meta.ino() });
        Ok(self.libs.last())
    }

    pub fn contains(&self, dev: u64, ino: u64) -> bool {
        self.seen.contains(&(dev, ino))
    }
}

/// The files named with `--libcuda`, each of which must exist.
pub fn explicit(paths: &[PathBuf]) -> Result<LibrarySet, DiscoverError> {
    let mut set = LibrarySet::default();
    for p in paths {
        set.add(p).map_err(|source| DiscoverError::Explicit { path: p.display().to_string(), source })?;
    }
    Ok(set)
}

/// Every libcuda on the host that gpumem can find.
pub fn discover() -> Result<LibrarySet, DiscoverError> {
    let mut set = LibrarySet::default();
    let mut candidates: Vec<PathBuf> = ldconfig_paths();
    for dir in SEARCH_DIRS {
        if let Ok(entries) = std::fs::read_dir(dir) {
            candidates.extend(entries.flatten().map(|e| e.path()).filter(|p| is_libcuda(p)));
        }
    }
    candidates.extend(mapped_paths());
    for path in candidates {
        // Unreadable or vanished candidates are not errors: the search goes on.
        let _ = set.add(&path);
    }
    if set.libs.is_empty() {
        return Err(DiscoverError::NotFound { dirs: SEARCH_DIRS.join(", ") });
    }
    Ok(set)
}

/// Whether a file name is the driver library (not a stub, not libcudart).
pub fn is_libcuda(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("libcuda.so") && !path.components().any(|c| c.as_os_str() == "stubs")
}

fn ldconfig_paths() -> Vec<PathBuf> {
    let out = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|cmd| Command::new(cmd).arg("-p").output().ok());
    out.map(|o| parse_ldconfig(&String::from_utf8_lossy(&o.stdout))).unwrap_or_default()
}

/// Paths of `libcuda.so*` in `ldconfig -p` output.
pub fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split_once("=>").map(|(_, p)| PathBuf::from(p.trim())))
        .filter(|p| is_libcuda(p))
        .collect()
}

/// `libcuda.so*` files mapped by running processes, reached through each
/// process's root so that container copies resolve.
pub fn mapped_paths() -> Vec<PathBuf> {
    let Ok(procs) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in procs.flatten() {
        // A process gone or not ours to read is skipped.
        let Ok(maps) = p.maps() else { continue };
        for path in libcuda_maps(&maps) {
            out.push(PathBuf::from(format!("/proc/{}/root{}", p.pid, path.display())));
        }
    }
    out
}

/// Distinct `libcuda.so*` files among a process's memory maps.
pub fn libcuda_maps(maps: &MemoryMaps) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in maps.iter() {
        if let MMapPath::Path(path) = &m.pathname {
            if is_libcuda(path) && !out.contains(path) {
                out.push(path.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldconfig_output_yields_driver_paths_only() {
        let text = "\t3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n\
            \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so (libc6,x86-64) => /usr/local/cuda/lib64/stubs/libcuda.so\n";
        assert_eq!(parse_ldconfig(text), vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")]);
    }

    #[test]
    fn maps_lines_yield_each_library_once() {
        let text = "7f00-7f10 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.535.1\n\
            7f10-7f20 r-xp 00010000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.535.1\n\
            7f20-7f30 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
            7f30-7f40 rw-p 00000000 00:00 0 \n";
        let maps = <MemoryMaps as procfs::FromBufRead>::from_buf_read(text.as_bytes()).unwrap();
        assert_eq!(libcuda_maps(&maps), vec![PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.535.1")]);
    }

    #[test]
    fn one_file_reached_by_two_paths_counts_once() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let real = dir.join("libcuda.so.1.2");
        std::fs::write(&real, b"x").unwrap();
        let link = dir.join("libcuda.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let set = explicit(&[real.clone(), link]).unwrap();
        assert_eq!(set.libs.len(), 1);
        let err = explicit(&[dir.join("missing.so")]).unwrap_err().to_string();
        assert!(err.contains("missing.so"), "{err}");
    }
}
