//! A small tmpfs mounted for one test (unmounted when dropped): a disk
//! that fills up.
use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::env::scratch;

pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` on a scratch directory.
    pub fn mount(bytes: u64) -> Self {
        let dir = scratch();
        let size = format!("size={bytes}");
        mount(Some("tmpfs"), dir.path(), Some("tmpfs"), MsFlags::empty(), Some(size.as_str()))
            .unwrap_or_else(|e| panic!("mounting a {bytes}-byte tmpfs on {}: {e}", dir.path().display()));
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk with a file of zeros, written until it is refused;
    /// removing the file gives the room back.
    pub fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut f = File::options().create(true).append(true).open(&path).expect("creating the filler");
        let block = [0u8; 4096];
        while matches!(f.write(&block), Ok(n) if n > 0) {}
        let _ = f.write(&[0u8; 1]); // the last bytes a block left
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = umount2(self.dir.path(), MntFlags::MNT_DETACH);
    }
}
