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
    collections::HashSet,
    io,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aya::programs::links::{FdLink, PinnedLink};

/// Where `--persist` pins by default.
pub const DEFAULT_ROOT: &str = "/sys/fs/bpf/gpumem";
/// Where the kernel's bpf filesystem is conventionally mounted.
const BPFFS: &str = "/sys/fs/bpf";

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error(
        "{path} is not on a bpf filesystem ({why}); mount one (`mount -t bpf bpf /sys/fs/bpf`) or give a \
         --pin-dir inside one"
    )]
    NoBpffs { path: String, why: String },
    #[error(
        "gpumem state of another build ({found}) is pinned at {dir}, and this agent ({ours}) cannot take it \
         over: {why}. Start the agent of that build, or run `gpumem detach --pin-dir {root}` to remove it \
         (its counts and limit usage are lost; processes then holding memory are counted from their next \
         call) and start again"
    )]
    OtherBuild { root: String, dir: String, found: String, ours: String, why: String },
    #[error(
        "the state of {count} gpumem builds is pinned at {root}: a takeover was interrupted, and which build's \
         programs count is not known here. Run `gpumem detach --pin-dir {root}` (counts and limit usage are \
         lost; processes then holding memory are counted from their next call) and start again"
    )]
    Interrupted { root: String, count: usize },
    #[error(
        "gpumem state is pinned at {0} (an agent ran with --persist): start with --persist to adopt it, \
         or run `gpumem detach` to remove it first"
    )]
    Pinned(String),
    #[error(
        "{left} program(s) of the unpinned links were still loaded after {secs} s: the kernel detaches them in \
         its own time, or something else holds them (check with `bpftool prog`)"
    )]
    Detaching { left: usize, secs: u64 },
    #[error("pinning {path}: {why}")]
    Pin { path: String, why: String },
    #[error("reading the maps of gpumem's eBPF object: {0}")]
    Object(String),
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: io::Error },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PersistError + 'a {
    move |source| PersistError::Io { what, path: path.display().to_string(), source }
}

/// FNV-1a over `bytes`: how builds and layouts are told apart.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The build's identity: FNV-1a over the object's bytes, whether deny
/// rewrites registers, and the ring buffer's size.
pub fn identity(object: &[u8], deny_by_registers: bool, ring_bytes: u32, multi_links: bool) -> String {
    let flags = [u8::from(deny_by_registers)].into_iter().chain(multi_links.then_some(2));
    let tail = flags.chain(ring_bytes.to_le_bytes());
    format!("{:016x}", fnv1a(object.iter().copied().chain(tail)))
}

/// The tag (`gpumem_common::handover::tag`) the programs of the build
/// with this [`identity`] (its pin directory's name) know it by.
pub fn tag(identity: &str) -> u32 {
    gpumem_common::handover::tag(u64::from_str_radix(identity, 16).unwrap_or(0))
}

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
    /// two builds' (an interrupted takeover) are refused.
    pub fn open(root: &Path, id: &str) -> Result<Self, PersistError> {
        ensure_bpffs(root)?;
        let dir = root.join(id);
        let others: Vec<String> = builds(root)?.into_iter().filter(|b| b != id).collect();
        if others.len() > 1 || (!others.is_empty() && dir.exists()) {
            let count = others.len() + usize::from(dir.exists());
            return Err(PersistError::Interrupted { root: root.display().to_string(), count });
        }
        let predecessor = others.into_iter().next();
        let pins = Self { adopted: predecessor.is_some() || dir.join("maps").is_dir(), dir, predecessor };
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

/// Checks that `root` is (or will be) on bpffs, mounting it at
/// /sys/fs/bpf where nothing is mounted there.
fn ensure_bpffs(root: &Path) -> Result<(), PersistError> {
    use nix::sys::statfs::{statfs, BPF_FS_MAGIC};
    let on_bpffs = |p: &Path| statfs(p).map(|s| s.filesystem_type() == BPF_FS_MAGIC);
    let probe = if root.exists() { root } else { root.parent().unwrap_or(root) };
    let no = |why: String| PersistError::NoBpffs { path: probe.display().to_string(), why };
    match on_bpffs(probe) {
        Ok(true) => Ok(()),
        Ok(false) if probe == Path::new(BPFFS) => {
            nix::mount::mount(
                Some("bpf"),
                BPFFS,
                Some("bpf"),
                nix::mount::MsFlags::empty(),
                Some("mode=0700"),
            )
            .map_err(|e| no(format!("nothing mounted there, and mounting bpffs failed: {e}")))?;
            tracing::info!("mounted bpffs at {BPFFS}");
            Ok(())
        }
        Ok(false) => Err(no("another file system".into())),
        Err(e) => Err(no(e.to_string())),
    }
}

/// What [`remove`] took away.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// Pinned links: each detached once its pin went (nothing else held it).
    pub links: usize,
    pub maps: usize,
}

/// How long [`remove`] waits for the kernel to finish detaching.
const DETACH_DEADLINE: Duration = Duration::from_secs(120);

/// Removes every pin under `root` and the directories, and returns once
/// the kernel has detached every link that was pinned: it releases a link
/// whose last reference goes in a work queue, after the unlink returns,
/// and lets go of the link's program only after detaching it, so the
/// programs' going is what is waited for.
pub fn remove(root: &Path) -> Result<Removed, PersistError> {
    let (removed, ids) = unpin(root)?;
    let started = Instant::now();
    loop {
        let left = aya::programs::loaded_programs().flatten().filter(|p| ids.contains(&p.id())).count();
        if left == 0 {
            return Ok(removed);
        }
        if started.elapsed() > DETACH_DEADLINE {
            return Err(PersistError::Detaching { left, secs: DETACH_DEADLINE.as_secs() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes every pin under `root` and the directories without waiting:
/// what was removed, and the pinned links' programs. For an agent undoing
/// its own pins, whose programs it still holds (they would never go).
pub fn unpin(root: &Path) -> Result<(Removed, HashSet<u32>), PersistError> {
    let (mut removed, mut ids) = (Removed::default(), HashSet::new());
    if root.exists() {
        remove_tree(root, &mut removed, &mut ids)?;
    }
    Ok((removed, ids))
}

fn remove_tree(dir: &Path, removed: &mut Removed, ids: &mut HashSet<u32>) -> Result<(), PersistError> {
    for entry in std::fs::read_dir(dir).map_err(io_err("reading", dir))? {
        let entry = entry.map_err(io_err("reading", dir))?;
        let path = entry.path();
        if entry.file_type().map_err(io_err("reading", &path))?.is_dir() {
            remove_tree(&path, removed, ids)?;
            continue;
        }
        if path.parent().and_then(Path::file_name).is_some_and(|n| n == "maps") {
            removed.maps += 1;
        } else {
            removed.links += 1;
            // Its program, to wait for the kernel to let it go (none for a
            // file that is not a link: a test's stand-in, removed as it is).
            if let Some(info) = PinnedLink::from_pin(&path).ok().and_then(|l| FdLink::from(l).info().ok()) {
                ids.insert(info.program_id());
            }
        }
        std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
    }
    std::fs::remove_dir(dir).map_err(io_err("removing", dir))
}

/// The names of the object's maps (the symbols of its `maps` section):
/// every one is pinned, so that nothing an adopting agent reads is new.
pub fn map_names(object: &'static [u8]) -> Result<Vec<&'static str>, PersistError> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(object).map_err(|e| PersistError::Object(e.to_string()))?;
    let Some(section) = file.section_by_name("maps") else {
        return Ok(Vec::new());
    };
    let index = section.index();
    Ok(file
        .symbols()
        .filter(|s| s.section_index() == Some(index))
        .filter_map(|s| s.name().ok())
        .filter(|n| !n.is_empty() && !n.contains('.'))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_changes_with_object_and_options() {
        let a = identity(b"object", false, 4096, false);
        assert_eq!(a, identity(b"object", false, 4096, false));
        assert_eq!(a.len(), 16);
        assert_ne!(a, identity(b"objecu", false, 4096, false));
        assert_ne!(a, identity(b"object", true, 4096, false));
        assert_ne!(a, identity(b"object", false, 8192, false));
        assert_ne!(
            a,
            identity(b"object", false, 4096, true),
            "the programs' attach type is the prog array's"
        );
    }

    #[test]
    fn every_state_map_of_the_object_is_pinned() {
        let names = map_names(super::super::OBJECT).expect("object parses");
        for map in
            ["EVENTS", "LIVE", "PROC_USAGE", "CGROUP_USAGE", "LIMITS", "LIMIT_STATE", "PENDING", "STATS"]
        {
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
