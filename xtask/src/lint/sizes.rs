//! Files small enough to read: no source file over [`MAX_LINES`] lines.
//! (Functions are held to 60 lines by clippy's `too_many_lines`, set in
//! clippy.toml.)
use std::path::{Path, PathBuf};

/// The most lines a source file may have.
pub const MAX_LINES: usize = 400;

/// Every `.rs` file under `root` (outside `target/`) over [`MAX_LINES`],
/// with its line count.
pub fn too_long(root: &Path) -> anyhow::Result<Vec<(PathBuf, usize)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)?.flatten() {
            let path = e.path();
            let name = e.file_name();
            if e.file_type()?.is_dir() {
                if name != "target" && !name.to_string_lossy().starts_with('.') {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "rs") {
                let lines = std::fs::read_to_string(&path)?.lines().count();
                if lines > MAX_LINES {
                    out.push((path, lines));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}
