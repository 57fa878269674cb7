//! Removing pins, and waiting until the kernel has let go of what they
//! held (`gpumem detach`, a takeover removing the old build's, a failed
//! start undoing its own).
use std::{
    collections::HashSet,
    path::Path,
    time::{Duration, Instant},
};

use aya::programs::links::{FdLink, PinnedLink};

use super::error::{io_err, PersistError};

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
    let (mut removed, mut ids) = (Removed::default(), HashSet::new());
    if !root.exists() {
        return Ok(removed);
    }
    // The directory itself goes last: one who holds it (`lock`) holds it
    // until the programs are gone.
    remove_children(root, &mut removed, &mut ids)?;
    let started = Instant::now();
    loop {
        let left = aya::programs::loaded_programs().flatten().filter(|p| ids.contains(&p.id())).count();
        if left == 0 {
            std::fs::remove_dir(root).map_err(io_err("removing", root))?;
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
    remove_children(dir, removed, ids)?;
    std::fs::remove_dir(dir).map_err(io_err("removing", dir))
}

fn remove_children(dir: &Path, removed: &mut Removed, ids: &mut HashSet<u32>) -> Result<(), PersistError> {
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
    Ok(())
}
