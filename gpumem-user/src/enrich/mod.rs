//! Enrichment: what a kernel record does not carry: the cgroup's path and
//! the container and pod it names (by name where the kubelet's log
//! directories say), the process's executable and command line, and the
//! devices as the driver (NVML) describes them.
pub mod cgroup;
pub mod container;
pub mod devices;
pub mod kubepods;
pub mod pods;
pub mod process;

use self::{
    cgroup::CgroupResolver,
    container::Container,
    pods::PodNames,
    process::{ProcessInfo, Processes},
};

/// The enrichers the agent's pipeline asks, each caching what it read.
#[derive(Default)]
pub struct Enricher {
    cgroups: CgroupResolver,
    pods: PodNames,
    procs: Processes,
    /// The container the latest cgroup's path named: records come in runs
    /// from one cgroup (the id and path it was parsed from: a renamed
    /// cgroup keeps its id).
    parsed: Option<(u64, String, Option<Container>)>,
}

impl Enricher {
    /// A cgroup's path and the container it names.
    pub fn cgroup(&mut self, id: u64) -> (Option<std::sync::Arc<str>>, Option<Container>) {
        let path = self.cgroups.path(id);
        let mut container = match (&self.parsed, path.as_deref()) {
            (_, None) => None,
            (Some((last, from, parsed)), Some(p)) if *last == id && from == p => parsed.clone(),
            (_, Some(p)) => {
                let parsed = container::parse(p);
                self.parsed = Some((id, p.to_string(), parsed.clone()));
                parsed
            }
        };
        if let Some(c) = container.as_mut() {
            self.pods.fill(c);
        }
        (path, container)
    }

    /// A process's executable and command line.
    pub fn process(&mut self, pid: u32) -> ProcessInfo {
        self.procs.get(pid)
    }

    /// A process's image is gone (exit or exec).
    pub fn forget(&mut self, pid: u32) {
        self.procs.forget(pid);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_renamed_cgroup_is_parsed_again_for_its_container() {
        let root = tempfile::tempdir().unwrap();
        let id = format!("docker-{}.scope", "ab".repeat(32));
        let dir = root.path().join("system.slice").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let ino = std::fs::metadata(&dir).unwrap().ino();
        let mut e =
            Enricher { cgroups: CgroupResolver::with_root(Some(root.path().into())), ..Enricher::default() };
        let (path, container) = e.cgroup(ino);
        assert_eq!(path.as_deref(), Some(format!("/system.slice/{id}").as_str()));
        assert_eq!(container.map(|c| c.runtime), Some("docker".to_string()));
        // Asked again: the same answer (from the memo).
        assert_eq!(e.cgroup(ino).1.map(|c| c.id), Some("ab".repeat(32)));
        // Renamed (same inode); an id the resolver does not know makes it
        // walk the tree again.
        std::fs::rename(&dir, root.path().join("system.slice/plain")).unwrap();
        assert_eq!(e.cgroup(u64::MAX), (None, None));
        assert_eq!(e.cgroup(ino), (Some("/system.slice/plain".into()), None));
    }
}
