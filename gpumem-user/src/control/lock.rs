//! One agent per control socket: `gpumem run` locks `SOCKET.lock` (flock)
//! before it loads or attaches anything and holds it until it has
//! detached. A second agent given the same socket is refused at once,
//! naming the first, instead of attaching every probe beside it and then
//! finding the socket taken (or, when both start together, taking the
//! socket file from the first).
use std::{
    fs::File,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use nix::fcntl::Flock;

use super::socket::ControlError;

/// The lock of a control socket, held: removed when dropped.
#[derive(Debug)]
pub struct SocketLock {
    path: PathBuf,
    _lock: Flock<File>,
}

impl SocketLock {
    /// Takes the lock of `socket` (its directory created if missing), or
    /// says which process holds it.
    pub fn take(socket: &Path) -> Result<Self, ControlError> {
        let path = lock_path(socket);
        let io_err = |source| ControlError::Io { path: path.clone(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err)?;
        }
        let open = |p: &Path| File::options().create(true).truncate(false).write(true).mode(0o600).open(p);
        match crate::flock::take(&path, open).map_err(io_err)? {
            Some(lock) => Ok(Self { path, _lock: lock }),
            None => Err(ControlError::Locked { holder: crate::flock::holder(&path), lock: path }),
        }
    }
}

impl Drop for SocketLock {
    /// The file goes while the lock is still held (the lock goes after
    /// this, with the field): an agent that opened it meanwhile finds it
    /// replaced and locks a new one. A killed agent leaves the file, which
    /// the next one locks as it is.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `SOCKET.lock`, beside the socket.
fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_agent_on_one_socket_is_refused_naming_the_first_and_the_file_goes_with_the_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/gpumem.sock");
        let first = SocketLock::take(&socket).expect("the first lock");
        let lock = dir.path().join("run/gpumem.sock.lock");
        assert!(lock.exists());
        match SocketLock::take(&socket) {
            Err(e @ ControlError::Locked { .. }) => {
                let said = e.to_string();
                assert!(said.contains(&format!("pid {}", std::process::id())), "{said}");
                assert!(said.contains(&lock.display().to_string()), "{said}");
            }
            other => panic!("a second lock: {other:?}"),
        }
        drop(first);
        assert!(!lock.exists(), "the lock file is removed with the lock");
        SocketLock::take(&socket).expect("the lock again, once released");
    }
}
