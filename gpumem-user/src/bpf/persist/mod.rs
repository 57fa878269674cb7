//! What stays in the kernel when the agent stops (`gpumem run --persist`):
//! the object's maps and every link, pinned under bpffs, so the kernel
//! keeps counting and enforcing with no agent running, and the next agent
//! of the same build adopts them.
//!
//! Layout under the root (default `/sys/fs/bpf/gpumem`):
//!
//! ```text
//! <build>/maps/<MAP>                    every map of the object
//! <build>/tracepoints/<program>         the exit and exec tracepoints
//! <build>/libs/<dev>_<inode>/<n>_<prog> each probe on one library file
//! ```
//!
//! `<build>` is [`identity`]: a hash of the eBPF object and of the load
//! options that change its maps or programs. Maps are reused only under
//! the same identity, so their layouts match by construction. bpffs
//! refuses names with a dot, hence the numbers for library files.
use std::{
    io,
    path::{Path, PathBuf},
};

use aya::programs::links::FdLink;

pub mod bpffs;
mod error;
mod identity;
pub mod interrupted;
pub mod lock;
mod remove;
pub mod word;

use error::io_err;
pub use error::PersistError;
pub use identity::{fnv1a, identity, tag};
pub use remove::{remove, unpin, Removed};

/// Where `--persist` pins by default.
pub const DEFAULT_ROOT: &str = "/sys/fs/bpf/gpumem";

/// One build's pins, opened by an agent running with `--persist`.
#[derive(Debug)]
pub struct Pins {
    dir: PathBuf,
    /// Whether the pins were there before this agent (it adopts them), or
    /// another build's are (it takes them over).
    adopted: bool,
    /// Another build whose pins this agent takes over (see `takeover`);
    /// this build's directory is created once they are checked.
    predecessor: Option<String>,
}

impl Pins {
    /// The pins of build `id` under `root`, created if there are none
    /// (mounting bpffs at /sys/fs/bpf if nothing is mounted there). Where
    /// another build's are, they are to be taken over ([`Self::predecessor`]);
    /// of two builds' (an interrupted takeover), those whose programs stand
    /// by are removed first (`interrupted`). The root is held (`lock`) as
    /// long as the pins are used.
    pub fn open(root: &lock::RootLock, id: &str) -> Result<Self, PersistError> {
        let root = root.path();
        let dir = root.join(id);
        let mut found = builds(root)?;
        if found.len() > 1 {
            found = vec![interrupted::settle(root, &found)?];
        }
        let predecessor = found.into_iter().find(|b| b != id);
        let adopted = predecessor.is_some() || dir.join("maps").is_dir();
        let pins = Self { adopted, dir, predecessor };
        if pins.predecessor.is_none() {
            pins.create()?;
        }
        Ok(pins)
    }

    /// Creates this build's directories.
    pub fn create(&self) -> Result<(), PersistError> {
        for sub in ["maps", "tracepoints", "libs"] {
            let path = self.dir.join(sub);
            std::fs::create_dir_all(&path).map_err(io_err("creating", &path))?;
        }
        Ok(())
    }

    /// The build whose pins this agent takes over, if another's are there.
    pub fn predecessor(&self) -> Option<&str> {
        self.predecessor.as_deref()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether an earlier agent left these pins (this one adopts them).
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.dir.join("maps").join(name)
    }

    pub fn tracepoint(&self, program: &str) -> PathBuf {
        self.dir.join("tracepoints").join(program)
    }

    /// The directory of one library file's links.
    pub fn library(&self, dev: u64, ino: u64) -> PathBuf {
        self.dir.join("libs").join(format!("{dev}_{ino}"))
    }

    /// How many library files have their links pinned here.
    pub fn libraries(&self) -> usize {
        std::fs::read_dir(self.dir.join("libs")).map_or(0, |d| d.count())
    }
}

/// The builds with pins under `root`.
fn builds(root: &Path) -> Result<Vec<String>, PersistError> {
    let entries = match std::fs::read_dir(root) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("reading", root)(e)),
    };
    Ok(entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
}

/// Whether any build's pins are under `root`.
pub fn pinned(root: &Path) -> bool {
    builds(root).is_ok_and(|b| !b.is_empty())
}

/// Refuses to start without `--persist` where pins are left: two sets of
/// programs would count and enforce side by side.
pub fn refuse_unadopted(root: &Path) -> Result<(), PersistError> {
    match pinned(root) {
        true => Err(PersistError::Pinned(root.display().to_string())),
        false => Ok(()),
    }
}

/// Pins `link` at `path`: it stays attached until the pin is removed.
pub fn pin(link: FdLink, path: &Path) -> Result<(), PersistError> {
    link.pin(path)
        .map(drop)
        .map_err(|e| PersistError::Pin { path: path.display().to_string(), why: e.to_string() })
}

/// The names of the object's maps (the symbols of its `maps` section and
/// of its BTF-defined `.maps`): every one is pinned, so that nothing an
/// adopting agent reads is new.
pub fn map_names(object: &'static [u8]) -> Result<Vec<&'static str>, PersistError> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(object).map_err(|e| PersistError::Object(e.to_string()))?;
    let sections: Vec<_> =
        ["maps", ".maps"].iter().filter_map(|n| file.section_by_name(n)).map(|s| s.index()).collect();
    Ok(file
        .symbols()
        .filter(|s| s.section_index().is_some_and(|i| sections.contains(&i)))
        .filter_map(|s| s.name().ok())
        .filter(|n| !n.is_empty() && !n.contains('.'))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_changes_with_object_and_options() {
        let a = identity(b"object", false, 4096, false, true);
        assert_eq!(a, identity(b"object", false, 4096, false, true));
        assert_eq!(a.len(), 16);
        assert_ne!(a, identity(b"objecu", false, 4096, false, true));
        assert_ne!(a, identity(b"object", true, 4096, false, true));
        assert_ne!(a, identity(b"object", false, 8192, false, true));
        assert_ne!(
            a,
            identity(b"object", false, 4096, true, true),
            "the programs' attach type is the prog array's"
        );
        assert_ne!(a, identity(b"object", false, 4096, false, false), "where calls in flight are kept");
    }

    #[test]
    fn every_state_map_of_the_object_is_pinned() {
        let names = map_names(super::super::OBJECT).expect("object parses");
        for map in [
            "EVENTS",
            "LIVE",
            "PROC_USAGE",
            "CGROUP_USAGE",
            "LIMITS",
            "LIMIT_STATE",
            "PENDING",
            "STATS",
            "TASK_CALLS",
        ] {
            assert!(names.contains(&map), "{map} missing from {names:?}");
        }
    }

    #[test]
    fn remove_counts_and_clears_a_tree() {
        let root = tempfile::tempdir().expect("tempdir");
        let build = root.path().join("gpumem").join("abc");
        std::fs::create_dir_all(build.join("maps")).unwrap();
        std::fs::create_dir_all(build.join("libs").join("1_2")).unwrap();
        std::fs::write(build.join("maps").join("LIVE"), b"").unwrap();
        std::fs::write(build.join("libs").join("1_2").join("0_alloc_entry"), b"").unwrap();
        let gone = remove(&root.path().join("gpumem")).expect("removed");
        assert_eq!(gone, Removed { links: 1, maps: 1 });
        assert!(!root.path().join("gpumem").exists());
        assert_eq!(remove(&root.path().join("gpumem")).unwrap(), Removed::default());
        // Undoing a library's own pins: the same, without the wait.
        let lib = root.path().join("libs").join("1_2");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("0_alloc_entry"), b"").unwrap();
        let (gone, programs) = unpin(&lib).expect("unpinned");
        assert_eq!((gone, programs.len()), (Removed { links: 1, maps: 0 }, 0));
        assert!(!lib.exists());
    }
}
