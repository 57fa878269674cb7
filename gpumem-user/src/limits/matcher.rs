//! Which allocations a rule covers: what a limit set at run time counts
//! of what its target already holds (see `carried.rs`).
use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use super::policy::Target;

/// Decides whether an allocation counts under a rule.
pub struct Matcher {
    who: Who,
    device: Option<u32>,
}

enum Who {
    Pid(u32),
    Comm(String),
    Cgroups(HashSet<u64>),
}

impl Matcher {
    /// The matcher of a rule on `target` (and `device`, if it names one);
    /// a cgroup target covers the cgroup and everything below it, found
    /// under `cgroup_root`.
    pub fn new(target: &Target, device: Option<u32>, cgroup_root: Option<&Path>) -> Self {
        let who = match target {
            Target::Pid(pid) => Who::Pid(*pid),
            Target::Comm(c) => Who::Comm(c.clone()),
            Target::Cgroup(path) => Who::Cgroups(
                cgroup_dir(cgroup_root, path)
                    .map(|d| subtree_ids(&d))
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
            ),
            // Never a rule of its own: each pod's rule is on its cgroup;
            // a namespace's total covers its pods' (`Matcher::of_cgroups`).
            Target::Namespace(_) | Target::NamespaceTotal(_) | Target::Pod(_) => Who::Cgroups(HashSet::new()),
        };
        Self { who, device }
    }

    /// The matcher of a rule over the cgroups `paths` (and everything
    /// below each), found under `cgroup_root`.
    pub fn of_cgroups<'a>(
        paths: impl Iterator<Item = &'a String>,
        device: Option<u32>,
        cgroup_root: Option<&Path>,
    ) -> Self {
        let ids = paths.filter_map(|p| cgroup_dir(cgroup_root, p)).flat_map(|d| subtree_ids(&d)).collect();
        Self { who: Who::Cgroups(ids), device }
    }

    /// Whether an allocation of process `tgid` (named `comm`, charged to
    /// `cgroup_id`, on `device`) counts under the rule.
    pub fn covers(&self, tgid: u32, comm: &str, cgroup_id: u64, device: Option<u32>) -> bool {
        if self.device.is_some_and(|d| Some(d) != device) {
            return false;
        }
        match &self.who {
            Who::Pid(pid) => *pid == tgid,
            Who::Comm(c) => c == comm,
            Who::Cgroups(ids) => ids.contains(&cgroup_id),
        }
    }
}

/// The directory of cgroup `path` (from the cgroup2 root).
pub fn cgroup_dir(root: Option<&Path>, path: &str) -> Option<PathBuf> {
    root.map(|r| r.join(path.trim_start_matches('/')))
}

/// The cgroup ids (directory inodes) of `dir` and everything below it.
fn subtree_ids(dir: &Path) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(id) = crate::enrich::cgroup::cgroup_id(&d) else { continue };
        ids.push(id);
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_covers_its_target_on_its_device() {
        let m = Matcher::new(&Target::Pid(7), Some(1), None);
        assert!(m.covers(7, "x", 0, Some(1)));
        assert!(!m.covers(7, "x", 0, Some(0)) && !m.covers(7, "x", 0, None) && !m.covers(8, "x", 0, Some(1)));
        let m = Matcher::new(&Target::Comm("python3".into()), None, None);
        assert!(m.covers(1, "python3", 0, None) && !m.covers(1, "python", 0, None));
    }

    #[test]
    fn a_cgroup_rule_covers_its_subtree() {
        let root = tempfile::tempdir().unwrap();
        let child = root.path().join("team/job");
        std::fs::create_dir_all(&child).unwrap();
        let id = |p: &Path| crate::enrich::cgroup::cgroup_id(p).unwrap();
        let m = Matcher::new(&Target::Cgroup("/team".into()), None, Some(root.path()));
        assert!(m.covers(1, "x", id(&child), None) && m.covers(1, "x", id(&root.path().join("team")), None));
        assert!(!m.covers(1, "x", id(root.path()), None));
    }
}
