//! The bpf filesystem the pins live on, mounted where it is missing.
use std::path::Path;

use super::error::PersistError;

/// Where the kernel's bpf filesystem is conventionally mounted.
pub const BPFFS: &str = "/sys/fs/bpf";

/// Whether `path` is on bpffs.
pub fn on_bpffs(path: &Path) -> nix::Result<bool> {
    use nix::sys::statfs::{statfs, BPF_FS_MAGIC};
    statfs(path).map(|s| s.filesystem_type() == BPF_FS_MAGIC)
}

/// Checks that `root` is (or will be) on bpffs, mounting it at
/// /sys/fs/bpf where nothing is mounted there.
pub fn ensure_bpffs(root: &Path) -> Result<(), PersistError> {
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
