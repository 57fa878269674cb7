//! Pods and containers by name, from the kubelet's log directories: no API
//! access, no credentials, only two directory listings.
//!
//! - `/var/log/pods/<namespace>_<pod>_<uid>/` names the pod of a UID;
//! - `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` (a link
//!   the kubelet makes for each container it starts) names the container
//!   of a container id.
//!
//! Namespaces, pod and container names are DNS labels or subdomains, which
//! hold no `_`, so each name splits exactly. What the directories do not
//! say stays absent: a container whose id no link names has no name, never
//! a guess. A lookup that misses reads the directories again, at most once
//! a second (a pod started since the last look).
use std::{
    collections::HashMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use super::container::Container;

/// Where the kubelet keeps its logs.
pub const KUBELET_LOGS: &str = "/var/log";
/// The shortest time between two readings of the directories for a
/// container they did not name.
const RESCAN_AFTER: Duration = Duration::from_secs(1);
/// How many missed containers are remembered before they are forgotten
/// at once.
const MISSED_KEPT: usize = 4096;

/// A pod's place, as its log directory names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDir {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
}

/// A container, as its log link names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLog {
    pub pod: String,
    pub namespace: String,
    pub container: String,
    pub id: String,
}

/// `<namespace>_<pod>_<uid>`.
pub fn parse_pod_dir(name: &str) -> Option<PodDir> {
    let mut parts = name.split('_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = parts.next().is_none() && !namespace.is_empty() && !pod.is_empty() && is_uid(uid);
    ok.then(|| PodDir { namespace: namespace.into(), pod: pod.into(), uid: uid.into() })
}

/// `<pod>_<namespace>_<container>-<64 hex digits>.log`.
pub fn parse_container_log(name: &str) -> Option<ContainerLog> {
    let stem = name.strip_suffix(".log")?;
    let (rest, id) = stem.rsplit_once('-')?;
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut parts = rest.split('_');
    let (pod, namespace, container) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = parts.next().is_none() && [pod, namespace, container].iter().all(|s| !s.is_empty());
    ok.then(|| ContainerLog {
        pod: pod.into(),
        namespace: namespace.into(),
        container: container.into(),
        id: id.into(),
    })
}

fn is_uid(s: &str) -> bool {
    s.len() == 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The names the kubelet's directories give, cached.
#[derive(Debug)]
pub struct PodNames {
    root: PathBuf,
    /// Pod UID -> (namespace, pod).
    pods: HashMap<String, (String, String)>,
    /// Container id -> container name.
    containers: HashMap<String, String>,
    /// Containers (and pod UIDs) a scan did not name, and when: looked
    /// for again a second later, not at each of their records.
    missed: HashMap<String, Instant>,
}

impl Default for PodNames {
    fn default() -> Self {
        Self::at(KUBELET_LOGS)
    }
}

impl PodNames {
    /// Names read from `root/pods` and `root/containers`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), pods: HashMap::new(), containers: HashMap::new(), missed: HashMap::new() }
    }

    /// Fills the namespace, pod and container names of a pod's container,
    /// where the directories say them.
    pub fn fill(&mut self, c: &mut Container) {
        let Some(uid) = c.pod_uid.as_deref() else { return };
        let known = |s: &Self| s.pods.contains_key(uid) && s.containers.contains_key(&c.id);
        if !known(self) && self.missed.get(&c.id).is_none_or(|t| t.elapsed() >= RESCAN_AFTER) {
            // A container not looked for yet is looked for at once (a new
            // pod's first records), one already missed once a second.
            self.rescan();
            if !known(self) {
                if self.missed.len() >= MISSED_KEPT {
                    self.missed.clear();
                }
                self.missed.insert(c.id.clone(), Instant::now());
            }
        }
        if let Some((namespace, pod)) = self.pods.get(uid) {
            (c.namespace, c.pod) = (Some(namespace.clone()), Some(pod.clone()));
        }
        c.name = self.containers.get(&c.id).cloned();
    }

    /// The namespace and name of pod `uid`, where its log directory says
    /// them (a pod not named yet is looked for again, at most once a
    /// second).
    pub fn pod(&mut self, uid: &str) -> Option<(String, String)> {
        if !self.pods.contains_key(uid) && self.missed.get(uid).is_none_or(|t| t.elapsed() >= RESCAN_AFTER) {
            self.rescan();
            if !self.pods.contains_key(uid) {
                if self.missed.len() >= MISSED_KEPT {
                    self.missed.clear();
                }
                self.missed.insert(uid.to_string(), Instant::now());
            }
        }
        self.pods.get(uid).cloned()
    }

    fn rescan(&mut self) {
        let names = |dir: &str| -> Vec<String> {
            std::fs::read_dir(self.root.join(dir))
                .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
                .unwrap_or_default()
        };
        self.pods = names("pods")
            .iter()
            .filter_map(|n| parse_pod_dir(n))
            .map(|p| (p.uid, (p.namespace, p.pod)))
            .collect();
        self.containers = names("containers")
            .iter()
            .filter_map(|n| parse_container_log(n))
            .map(|c| (c.id, c.container))
            .collect();
    }
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
