//! A child cgroup v2 made for one test (with its parents), removed when
//! dropped.
use std::path::PathBuf;

use gpumem::enrich::cgroup;

/// A child cgroup v2 made for one test (with its parents), removed on drop.
pub struct Cgroup {
    pub dir: PathBuf,
    /// The path as gpumem reports it (relative to the cgroup2 root).
    pub path: String,
    pub id: u64,
    /// Directories made, outermost first.
    made: Vec<PathBuf>,
}

impl Cgroup {
    pub fn create(name: &str) -> Self {
        Self::create_nested(name, &[])
    }

    /// `gpumem-test-PID-NAME/NESTED[0]/NESTED[1]/...`.
    pub fn create_nested(name: &str, nested: &[&str]) -> Self {
        let root = cgroup::host_cgroup2_mount().expect("no cgroup2 mount on this host");
        let mut rel = format!("gpumem-test-{}-{name}", std::process::id());
        let mut made = vec![root.join(&rel)];
        for n in nested {
            rel = format!("{rel}/{n}");
            made.push(root.join(&rel));
        }
        for d in &made {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("creating cgroup {}: {e}", d.display()));
        }
        let dir = made.last().unwrap().clone();
        let id = cgroup::cgroup_id(&dir).unwrap();
        Self { dir, path: format!("/{rel}"), id, made }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have been waited for; an rmdir that still fails
        // leaves an empty cgroup behind, which is harmless.
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}
