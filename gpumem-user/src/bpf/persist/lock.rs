//! One agent at a time on a pin root: a `--persist` agent and `gpumem
//! detach` hold an exclusive lock (flock) on the root directory, the agent
//! for its whole life. The kernel lets the lock go however the holder
//! ends, SIGKILL included, so a lock found held is a live process: an
//! agent still starting, taking over or running (which the control socket
//! does not show before its event loop), or a detach under way.
use std::{
    fs::File,
    path::{Path, PathBuf},
};

use nix::fcntl::Flock;

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

/// Takes the lock of directory `root`, created if missing.
fn hold(root: &Path) -> Result<RootLock, PersistError> {
    let open = |dir: &Path| {
        std::fs::create_dir_all(dir)?;
        File::open(dir)
    };
    match crate::flock::take(root, open).map_err(io_err("locking", root))? {
        Some(lock) => Ok(RootLock { path: root.to_path_buf(), _lock: lock }),
        None => {
            Err(PersistError::InUse { root: root.display().to_string(), holder: crate::flock::holder(root) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
