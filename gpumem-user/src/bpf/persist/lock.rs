//! One agent at a time on a pin root: a `--persist` agent and `gpumem
//! detach` hold an exclusive lock (flock) on the root directory, the agent
//! for its whole life. The kernel lets the lock go however the holder
//! ends, SIGKILL included, so a lock found held is a live process: an
//! agent still starting, taking over or running (which the control socket
//! does not show before its event loop), or a detach under way.
use std::{
    fs::File,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use nix::fcntl::{Flock, FlockArg};

use super::{
    bpffs,
    error::{io_err, PersistError},
};

/// A pin root, held: while it lives, the pins under it are this
/// process's to adopt, take over or remove.
#[derive(Debug)]
pub struct RootLock {
    path: PathBuf,
    _lock: Flock<File>,
}

impl RootLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Takes the lock of `root` (created if missing, bpffs mounted at
/// /sys/fs/bpf if nothing is), or says who holds it.
pub fn take(root: &Path) -> Result<RootLock, PersistError> {
    bpffs::ensure_bpffs(root)?;
    hold(root)
}

/// Takes the lock of directory `root`, created if missing. A root removed
/// between its opening and its locking (by the holder that just let go)
/// is not the root any more: taken again.
fn hold(root: &Path) -> Result<RootLock, PersistError> {
    loop {
        std::fs::create_dir_all(root).map_err(io_err("creating", root))?;
        let dir = File::open(root).map_err(io_err("opening", root))?;
        let lock = match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(PersistError::InUse { root: root.display().to_string(), holder: holder(root) })
            }
            Err((_, errno)) => return Err(io_err("locking", root)(errno.into())),
        };
        let held = lock.metadata().map_err(io_err("reading", root))?;
        let now = std::fs::metadata(root).ok();
        if now.is_some_and(|m| (m.dev(), m.ino()) == (held.dev(), held.ino())) {
            return Ok(RootLock { path: root.to_path_buf(), _lock: lock });
        }
    }
}

/// Who holds the lock of `root`: "pid N (comm)", from /proc/locks.
fn holder(root: &Path) -> String {
    let found = std::fs::metadata(root).ok().and_then(|m| {
        let dev = m.dev();
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        flock_holder(&locks, nix::sys::stat::major(dev), nix::sys::stat::minor(dev), m.ino())
    });
    match found {
        Some(pid) => {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("pid {pid} ({})", comm.trim())
        }
        None => "another process".to_string(),
    }
}

/// The pid holding a flock on inode `ino` of device `major:minor`, from
/// the text of /proc/locks (`1: FLOCK  ADVISORY  WRITE 2034 00:1d:12345 0
/// EOF`; waiters' lines have `->` after the number and are skipped).
fn flock_holder(locks: &str, major: u64, minor: u64, ino: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, "FLOCK", _, _, pid, file, ..] = fields.as_slice() else { return None };
        let mut parts = file.split(':');
        let (maj, min, i) = (parts.next()?, parts.next()?, parts.next()?);
        let same = u64::from_str_radix(maj, 16).ok()? == major
            && u64::from_str_radix(min, 16).ok()? == minor
            && i.parse::<u64>().ok()? == ino;
        same.then(|| pid.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_proc_locks() {
        let locks = "1: POSIX  ADVISORY  WRITE 77 00:1d:42 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 2034 00:1e:41 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 2040 00:1d:42 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 2035 00:1d:42 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 99 103:1d:42 0 EOF\n";
        assert_eq!(flock_holder(locks, 0, 0x1d, 42), Some(2035));
        assert_eq!(flock_holder(locks, 0x103, 0x1d, 42), Some(99));
        assert_eq!(flock_holder(locks, 0, 0x1d, 43), None);
        assert_eq!(flock_holder("", 0, 0x1d, 42), None);
        assert_eq!(flock_holder("3: FLOCK ADVISORY WRITE x 00:1d:42 0 EOF", 0, 0x1d, 42), None);
    }

    #[test]
    fn a_second_lock_on_one_root_is_refused_and_released_with_the_first() {
        let root = tempfile::tempdir().expect("tempdir");
        let first = hold(root.path()).expect("the first lock");
        match hold(root.path()) {
            Err(PersistError::InUse { holder, .. }) => {
                assert!(holder.starts_with(&format!("pid {}", std::process::id())), "{holder}")
            }
            other => panic!("a second lock: {other:?}"),
        }
        drop(first);
        hold(root.path()).expect("the lock again, once released");
    }
}
