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
    /// The container the latest cgroup's path named: records come in runs
    /// from one cgroup, and an id names one cgroup for good.
    parsed: Option<(u64, Option<Container>)>,
}

impl Enricher {
    /// A cgroup's path and the container it names.
    pub fn cgroup(&mut self, id: u64) -> (Option<String>, Option<Container>) {
        let path = self.cgroups.path(id);
        let mut container = match (&self.parsed, path.as_deref()) {
            (Some((last, parsed)), _) if *last == id => parsed.clone(),
            (_, Some(p)) => {
                let parsed = container::parse(p);
                self.parsed = Some((id, parsed.clone()));
                parsed
            }
            (_, None) => None,
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
