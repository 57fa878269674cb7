//! cgroup v2 id -> path, through the cgroup2 mount.
//!
//! On cgroup v2 a cgroup's id is the inode number of its directory, which
//! is what `bpf_get_current_cgroup_id()` returns. The resolver walks the
//! mount once and again whenever it meets an id it does not know (new
//! containers appear all the time): at once for an id it has not looked
//! for yet, at most once a second for one it already missed (a cgroup
//! removed while its records still arrive must not cost a walk each).
use procfs::process::MountInfos;
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use crate::fast_hash::HashMap;

const RESCAN_EVERY: Duration = Duration::from_secs(1);

pub struct CgroupResolver {
    root: Option<PathBuf>,
    /// Shared with every record of the cgroup (a count, not a copy).
    paths: HashMap<u64, Arc<str>>,
    /// Ids a walk did not find, and when.
    missed: HashMap<u64, Instant>,
}

/// How many missed ids are remembered before they are forgotten at once.
const MISSED_KEPT: usize = 4096;

impl CgroupResolver {
    /// A resolver over the host's cgroup2 mount (none: paths stay unknown).
    pub fn new() -> Self {
        Self::with_root(host_cgroup2_mount())
    }

    pub fn with_root(root: Option<PathBuf>) -> Self {
        Self { root, paths: HashMap::default(), missed: HashMap::default() }
    }

    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// The path of cgroup `id` relative to the cgroup2 root ("/" for the
    /// root itself), or None if it is not (or no longer) there.
    pub fn path(&mut self, id: u64) -> Option<Arc<str>> {
        if let Some(p) = self.paths.get(&id) {
            return Some(p.clone());
        }
        if self.missed.get(&id).is_some_and(|t| t.elapsed() < RESCAN_EVERY) {
            return None;
        }
        self.rescan();
        if !self.paths.contains_key(&id) {
            if self.missed.len() >= MISSED_KEPT {
                self.missed.clear();
            }
            self.missed.insert(id, Instant::now());
        }
        self.paths.get(&id).cloned()
    }

    /// Walks the whole hierarchy again: the cgroups found are the paths
    /// known (each path already known shared as it was), and those
    /// removed are forgotten, so that a node's pods coming and going do
    /// not grow the map. A walk that fails part way adds what it found and
    /// forgets nothing.
    pub fn rescan(&mut self) {
        let Some(root) = self.root.clone() else {
            return;
        };
        let mut found: HashMap<u64, Arc<str>> = HashMap::default();
        let walked = walk(&root, |dir, id| {
            let rel = dir.strip_prefix(&root).map(|r| format!("/{}", r.display())).unwrap_or_default();
            let rel = if rel == "/" { "/" } else { rel.as_str() };
            let path = self.paths.get(&id).filter(|p| ***p == *rel).cloned().unwrap_or_else(|| rel.into());
            found.insert(id, path);
        });
        match walked {
            Ok(()) => self.paths = found,
            Err(_) => self.paths.extend(found),
        }
    }
}

/// Calls `found` with every cgroup directory under `root` (the cgroup2
/// mount) and its id, `root` first. A directory removed meanwhile is
/// skipped; any other error stops the walk and is returned, what was
/// found so far found (the resolver takes that; [`present`] takes none).
fn walk(root: &Path, mut found: impl FnMut(&Path, u64)) -> std::io::Result<()> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let meta = match std::fs::metadata(&dir) {
            Err(e) if gone(&e) && dir != root => continue,
            other => other?,
        };
        found(&dir, meta.ino());
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if gone(&e) => continue,
            other => other?,
        };
        for e in entries {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(())
}

/// The id of the cgroup2 hierarchy's root cgroup.
pub const ROOT_CGROUP_ID: u64 = 1;

/// The id of every cgroup there is now, where that can be told for
/// certain: the whole walk of the host's cgroup2 mount succeeded and the
/// mount is the hierarchy's root (not a container's own subtree, as a
/// private cgroup namespace mounts it). None otherwise, said once: a
/// cgroup missing from the set was removed, and what it holds can be
/// forgotten, so a partial set must not be taken for the whole.
pub fn present() -> Option<std::collections::HashSet<u64>> {
    static SAID: std::sync::Once = std::sync::Once::new();
    let why = match host_cgroup2_mount() {
        None => "no cgroup2 mount".to_string(),
        Some(root) => match present_in(&root) {
            Ok(ids) => return Some(ids),
            Err(e) => format!("{}: {e}", root.display()),
        },
    };
    SAID.call_once(|| {
        tracing::warn!(
            "the removed cgroups' totals cannot be told apart ({why}); the kernel keeps them, and a node \
             whose pods come and go fills its 16,384 over time: mount the host's whole cgroup2 tree"
        )
    });
    None
}

/// [`present`] under `root`: an error unless the walk succeeded and `root`
/// is the hierarchy's root.
pub fn present_in(root: &Path) -> std::io::Result<std::collections::HashSet<u64>> {
    let ids = ids_under(root)?;
    if !ids.contains(&ROOT_CGROUP_ID) {
        return Err(std::io::Error::other(
            "not the cgroup2 hierarchy's root (a cgroup namespace's own subtree?)",
        ));
    }
    Ok(ids)
}

/// The id of every directory under `root`, `root`'s own too ([`walk`]).
fn ids_under(root: &Path) -> std::io::Result<std::collections::HashSet<u64>> {
    let mut ids = std::collections::HashSet::new();
    walk(root, |_, id| {
        ids.insert(id);
    })?;
    Ok(ids)
}

impl Default for CgroupResolver {
    fn default() -> Self {
        Self::new()
    }
}

/// The mount point of the cgroup2 hierarchy as this process sees it (on
/// hybrid hosts, e.g. `/sys/fs/cgroup/unified`), if one is mounted.
pub fn host_cgroup2_mount() -> Option<PathBuf> {
    procfs::process::Process::myself().ok()?.mountinfo().ok().as_ref().and_then(cgroup2_mount)
}

/// The mount point of the cgroup2 hierarchy among `mounts`.
pub fn cgroup2_mount(mounts: &MountInfos) -> Option<PathBuf> {
    mounts.iter().find(|m| m.fs_type == "cgroup2").map(|m| m.mount_point.clone())
}

/// The cgroup2 id of a cgroup directory.
pub fn cgroup_id(dir: &Path) -> std::io::Result<u64> {
    Ok(std::fs::metadata(dir)?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts(text: &str) -> MountInfos {
        <MountInfos as procfs::FromBufRead>::from_buf_read(text.as_bytes()).unwrap()
    }

    #[test]
    fn finds_cgroup2_in_hybrid_and_unified_mountinfo() {
        let hybrid = "25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
            26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n\
            27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(cgroup2_mount(&mounts(hybrid)), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let unified = "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(&mounts(unified)), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_mount(&mounts("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")), None);
    }

    #[test]
    fn resolves_directories_by_inode_under_a_root() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        let child = root.join("kubepods/pod1");
        std::fs::create_dir_all(&child).unwrap();
        let mut r = CgroupResolver::with_root(Some(root.clone()));
        assert_eq!(r.path(cgroup_id(&child).unwrap()).as_deref(), Some("/kubepods/pod1"));
        assert_eq!(r.path(cgroup_id(&root).unwrap()).as_deref(), Some("/"));
        assert_eq!(r.path(1), None);
    }

    #[test]
    fn a_cgroup_made_just_after_a_walk_is_found_at_its_first_record() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        let mut r = CgroupResolver::with_root(Some(root.clone()));
        assert_eq!(r.path(1), None, "a walk, and id 1 missed");
        let late = root.join("libpod_parent/libpod-abc");
        std::fs::create_dir_all(&late).unwrap();
        assert_eq!(r.path(cgroup_id(&late).unwrap()).as_deref(), Some("/libpod_parent/libpod-abc"));
    }

    #[test]
    fn a_rescan_forgets_removed_cgroups_and_keeps_the_others_shared() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        let (kept, gone) = (root.join("kubepods/pod1"), root.join("kubepods/pod2"));
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::create_dir_all(&gone).unwrap();
        let mut r = CgroupResolver::with_root(Some(root.clone()));
        let (kept_id, gone_id) = (cgroup_id(&kept).unwrap(), cgroup_id(&gone).unwrap());
        let before = r.path(kept_id).unwrap();
        assert!(r.path(gone_id).is_some());
        std::fs::remove_dir(&gone).unwrap();
        r.rescan();
        assert!(!r.paths.contains_key(&gone_id), "a removed cgroup is forgotten");
        assert!(Arc::ptr_eq(&before, &r.path(kept_id).unwrap()), "the same path, shared as it was");
    }

    #[test]
    fn present_ids_are_every_directory_there_and_none_removed_and_only_under_the_hierarchys_root() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        let (kept, gone) = (root.join("kubepods/pod1/ctr"), root.join("kubepods/pod2"));
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::create_dir_all(&gone).unwrap();
        std::fs::write(root.join("kubepods/cgroup.procs"), "").unwrap();
        let gone_id = cgroup_id(&gone).unwrap();
        std::fs::remove_dir(&gone).unwrap();
        let ids = ids_under(&root).unwrap();
        let expected: std::collections::HashSet<u64> = ["", "kubepods", "kubepods/pod1", "kubepods/pod1/ctr"]
            .iter()
            .map(|d| cgroup_id(&root.join(d)).unwrap())
            .collect();
        assert_eq!(ids, expected, "directories only");
        assert!(!ids.contains(&gone_id));
        // A scratch directory is not a cgroup2 root (whose id is 1): from
        // what is under it nothing is told removed.
        assert_ne!(cgroup_id(&root).unwrap(), ROOT_CGROUP_ID);
        assert!(present_in(&root).is_err());
        assert!(present_in(&root.join("nowhere")).is_err(), "a root that is not there");
    }
}
