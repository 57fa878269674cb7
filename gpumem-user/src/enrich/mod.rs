//! Enrichment: what a kernel record does not carry: the cgroup's path and
//! the container and pod it names (by name where the kubelet's log
//! directories say), the process's executable and command line, and the
//! devices as the driver (NVML) describes them.
pub mod cgroup;
pub mod container;
pub mod devices;
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
}

impl Enricher {
    /// A cgroup's path and the container it names.
    pub fn cgroup(&mut self, id: u64) -> (Option<String>, Option<Container>) {
        let path = self.cgroups.path(id);
        let mut container = path.as_deref().and_then(container::parse);
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
