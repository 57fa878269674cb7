//! An exclusive lock (flock) on a file or directory, taken without
//! waiting, and who holds it when it is taken (from /proc/locks). The
//! kernel lets a flock go however its holder ends, SIGKILL included, so a
//! lock found held is a live process.
use std::{fs::File, io, os::unix::fs::MetadataExt, path::Path};

use nix::fcntl::{Flock, FlockArg};

/// Opens `path` with `open` and locks it: `None` when another process
/// holds it. A path replaced between its opening and its locking (removed
/// by the holder that just let go) is not the path any more: opened again.
pub fn take(path: &Path, open: impl Fn(&Path) -> io::Result<File>) -> io::Result<Option<Flock<File>>> {
    loop {
        let lock = match Flock::lock(open(path)?, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
            Err((_, errno)) => return Err(errno.into()),
        };
        let held = lock.metadata()?;
        let now = std::fs::metadata(path).ok();
        if now.is_some_and(|m| (m.dev(), m.ino()) == (held.dev(), held.ino())) {
            return Ok(Some(lock));
        }
    }
}

/// Who holds the lock of `path`: "pid N (comm)", from /proc/locks.
pub fn holder(path: &Path) -> String {
    let found = std::fs::metadata(path).ok().and_then(|m| {
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
    fn a_file_removed_by_the_holder_that_let_go_is_locked_anew() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let create = |p: &Path| File::options().create(true).truncate(false).write(true).open(p);
        let first = take(&path, create).expect("locking").expect("the first lock");
        assert!(take(&path, create).expect("locking").is_none(), "a second lock while the first is held");
        assert!(holder(&path).starts_with(&format!("pid {}", std::process::id())), "{}", holder(&path));
        // The holder removes the file, then lets go: the next lock is the
        // new file's, not the removed one's.
        let stale = File::open(&path).expect("opening the held file");
        std::fs::remove_file(&path).expect("removing the lock file");
        drop(first);
        let again = take(&path, create).expect("locking").expect("the lock of the new file");
        let ino = |f: &File| f.metadata().expect("metadata").ino();
        assert_ne!(ino(&again), ino(&stale));
        assert_eq!(ino(&again), std::fs::metadata(&path).expect("the new file").ino());
    }
}
