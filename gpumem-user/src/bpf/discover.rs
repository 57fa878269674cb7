//! Finding the library files to attach to: the CUDA driver (`libcuda.so*`)
//! and NVIDIA's management library (`libnvidia-ml.so*`, whose memory
//! queries a limit's view answers too).
//!
//! Order: paths given with `--libcuda` (`--libnvml`); otherwise the
//! ldconfig cache, the usual install directories, and every such file
//! mapped by a running process (reached through `/proc/PID/root`, so a
//! container's own copy is found too). Files are told apart by device and
//! inode: one probe set per distinct file, however many paths lead to it.
use std::{
    collections::HashSet,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::Command,
};

use gpumem_common::api::Library as Kind;

/// Directories where NVIDIA's installers and distributions put the
/// driver's libraries.
pub const SEARCH_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/cuda/compat",
    "/usr/lib/wsl/lib",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
];

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("--{flag} {path}")]
    Explicit { flag: &'static str, path: String, source: std::io::Error },
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
    /// Which library it is: which rows of the probe table it gets.
    pub kind: Kind,
}

/// Distinct files, by (device, inode).
#[derive(Debug, Default)]
pub struct LibrarySet {
    pub libs: Vec<Library>,
    seen: HashSet<(u64, u64)>,
}

impl LibrarySet {
    /// Adds `path`, a file of library `kind`, unless its file is already in
    /// the set; returns the new entry.
    pub fn add(&mut self, path: &Path, kind: Kind) -> std::io::Result<Option<&Library>> {
        let meta = std::fs::metadata(path)?;
        if !self.seen.insert((meta.dev(), meta.ino())) {
            return Ok(None);
        }
        self.libs.push(Library { path: path.to_path_buf(), dev: meta.dev(), ino: meta.ino(), kind });
        Ok(self.libs.last())
    }

    /// Whether the set has a file of library `kind`.
    pub fn has(&self, kind: Kind) -> bool {
        self.libs.iter().any(|l| l.kind == kind)
    }

    pub fn contains(&self, dev: u64, ino: u64) -> bool {
        self.seen.contains(&(dev, ino))
    }
}

/// The files named with `--libcuda` (`kind` Cuda) or `--libnvml` (Nvml),
/// added to `set`; each must exist.
pub fn explicit(set: &mut LibrarySet, paths: &[PathBuf], kind: Kind) -> Result<(), DiscoverError> {
    explicit_where(set, paths, kind, |_| true)
}

/// [`explicit`] for the paths `required` says must be there now; the
/// others are added if they are.
fn explicit_where(
    set: &mut LibrarySet,
    paths: &[PathBuf],
    kind: Kind,
    required: impl Fn(&Path) -> bool,
) -> Result<(), DiscoverError> {
    let flag = match kind {
        Kind::Cuda => "libcuda",
        Kind::Nvml => "libnvml",
    };
    for p in paths {
        match set.add(p, kind) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required(p) => {}
            Err(source) => {
                return Err(DiscoverError::Explicit { flag, path: p.display().to_string(), source })
            }
        }
    }
    Ok(())
}

/// The driver's library files now in the install directories
/// ([`SEARCH_DIRS`]) and at the `--libcuda` paths given: what an agent
/// waiting for a driver looks at each rescan (no ldconfig run each time).
pub fn installed(given: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = given.iter().filter(|p| p.exists()).cloned().collect();
    for dir in SEARCH_DIRS {
        if let Ok(entries) = std::fs::read_dir(dir) {
            out.extend(entries.flatten().map(|e| e.path()).filter(|p| kind_of(p) == Some(Kind::Cuda)));
        }
    }
    out
}

/// Every file of the `kinds` libraries on the host that gpumem can find,
/// added to `set`.
pub fn discover(set: &mut LibrarySet, kinds: &[Kind]) {
    let mut candidates: Vec<PathBuf> = ldconfig_paths();
    for dir in SEARCH_DIRS {
        if let Ok(entries) = std::fs::read_dir(dir) {
            candidates.extend(entries.flatten().map(|e| e.path()));
        }
    }
    candidates.extend(mapped_paths(|_| true));
    for path in candidates {
        let Some(kind) = kind_of(&path).filter(|k| kinds.contains(k)) else { continue };
        // Unreadable or vanished candidates are not errors: the search goes on.
        let _ = set.add(&path, kind);
    }
}

/// The libraries to attach at start: `--libcuda` (else every libcuda
/// found) and `--libnvml` (else every libnvidia-ml found, perhaps none).
/// `require`: no libcuda (or a `--libcuda` file not there) is an error;
/// without it, a set with no libcuda is the agent's to wait with.
pub fn libraries(
    libcuda: &[PathBuf],
    libnvml: &[PathBuf],
    require: bool,
) -> Result<LibrarySet, DiscoverError> {
    let mut set = LibrarySet::default();
    let mut search = Vec::new();
    for (paths, kind) in [(libcuda, Kind::Cuda), (libnvml, Kind::Nvml)] {
        if paths.is_empty() {
            search.push(kind);
        }
        explicit_where(&mut set, paths, kind, |_| require || kind == Kind::Nvml)?;
    }
    discover(&mut set, &search);
    if require && !set.has(Kind::Cuda) {
        return Err(DiscoverError::NotFound { dirs: SEARCH_DIRS.join(", ") });
    }
    Ok(set)
}

/// What an agent with no libcuda says it waits for.
pub fn waiting_for(given: &[PathBuf]) -> String {
    match given {
        [] => format!(
            "no libcuda.so* found yet: the agent runs and attaches to one when it appears (looking every \
             rescan in {}, and in the memory maps of processes); --require-libcuda exits instead",
            SEARCH_DIRS.join(", ")
        ),
        paths => format!(
            "--libcuda {} not there yet: the agent runs and attaches when it appears (looking every rescan); \
             --require-libcuda exits instead",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Which library a file is, by its name: the driver (not a stub, not
/// libcudart) or NVML; None for any other file.
pub fn kind_of(path: &Path) -> Option<Kind> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if path.components().any(|c| c.as_os_str() == "stubs") {
        return None;
    }
    [Kind::Cuda, Kind::Nvml].into_iter().find(|k| name.starts_with(k.file_prefix()))
}

fn ldconfig_paths() -> Vec<PathBuf> {
    let out = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|cmd| Command::new(cmd).arg("-p").output().ok());
    out.map(|o| parse_ldconfig(&String::from_utf8_lossy(&o.stdout))).unwrap_or_default()
}

/// Paths of the driver's libraries in `ldconfig -p` output.
pub fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split_once("=>").map(|(_, p)| PathBuf::from(p.trim())))
        .filter(|p| kind_of(p).is_some())
        .collect()
}

/// The driver's library files mapped by the running processes whose map
/// `wanted` asks to read (by pid), each reached through its process's
/// root so that a container's copy resolves. A process gone or not ours
/// to read is skipped.
pub fn mapped_paths(mut wanted: impl FnMut(u32) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    let mut maps = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if !wanted(pid) || read_into(&format!("/proc/{pid}/maps"), &mut maps).is_err() {
            continue;
        }
        for path in library_paths(&maps) {
            out.push(PathBuf::from(format!("/proc/{pid}/root{path}")));
        }
    }
    out
}

/// Reads the file at `path` into `buf`, which is emptied first.
fn read_into(path: &str, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Read;
    buf.clear();
    std::fs::File::open(path)?.read_to_end(buf).map(drop)
}

/// The distinct driver library paths in a `/proc/PID/maps` text, matched
/// as text: only lines naming a driver library are parsed, and a line's
/// path is what follows its fifth space, trimmed, as procfs takes it.
pub fn library_paths(maps: &[u8]) -> Vec<String> {
    let prefixes = [Kind::Cuda.file_prefix().as_bytes(), Kind::Nvml.file_prefix().as_bytes()];
    let mut out: Vec<String> = Vec::new();
    for line in maps.split(|&b| b == b'\n') {
        if !prefixes.iter().any(|p| line.windows(p.len()).any(|w| w == *p)) {
            continue;
        }
        let line = String::from_utf8_lossy(line);
        let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim) else { continue };
        if path.starts_with('/') && kind_of(Path::new(path)).is_some() && !out.iter().any(|p| p == path) {
            out.push(path.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldconfig_output_yields_driver_paths_only() {
        let text = "\t4 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n\
            \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so (libc6,x86-64) => /usr/local/cuda/lib64/stubs/libcuda.so\n\
            \tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n";
        let found = parse_ldconfig(text);
        assert_eq!(
            found,
            [
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
            ]
        );
        assert_eq!(
            found.iter().map(|p| kind_of(p)).collect::<Vec<_>>(),
            [Some(Kind::Cuda), Some(Kind::Nvml)]
        );
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
        let mut set = LibrarySet::default();
        explicit(&mut set, &[real.clone(), link], Kind::Cuda).unwrap();
        assert_eq!(set.libs.len(), 1);
        let err = explicit(&mut set, &[dir.join("missing.so")], Kind::Nvml).unwrap_err().to_string();
        assert!(err.contains("--libnvml") && err.contains("missing.so"), "{err}");
    }
}

#[cfg(test)]
mod maps_tests;
