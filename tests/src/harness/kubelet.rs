//! A Kubernetes node's layout as the kubelet makes it, for tests that
//! have no kubelet: a pod's cgroup (either cgroup driver) with a
//! container's cgroup in it, and the pod's log directory
//! (`/var/log/pods/NS_POD_UID/CONTAINER/0.log`, linked from
//! `/var/log/containers`), from which the agent names pods. Removed when
//! dropped, with the parents the test made if they are left empty.
use std::path::{Path, PathBuf};

use super::cgroup::Cgroup;

/// Which cgroup driver's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

/// One pod of one container, burstable.
pub struct KubePod {
    pub uid: String,
    /// The pod's container's id.
    pub id: String,
    /// The pod's container's cgroup (its processes run here).
    pub container: Cgroup,
    /// The pod's own cgroup's path (what its rule is on).
    pub pod_path: String,
    logs: Option<KubeletLogs>,
}

impl KubePod {
    /// Pod `namespace/name` with UID `uid`, its container `id` (64 hex
    /// digits), under the test's cgroup `node` (a kubelet started with
    /// `--cgroup-root`, so the host's own pods are left alone).
    pub fn make(driver: Driver, node: &str, (namespace, name, uid): (&str, &str, &str), id: &str) -> Self {
        let mut pod = Self::unnamed(driver, node, uid, id);
        pod.name(namespace, name);
        pod
    }

    /// The pod's cgroups, before the kubelet has made its log directory
    /// (nothing names it yet).
    pub fn unnamed(driver: Driver, node: &str, uid: &str, id: &str) -> Self {
        let nested: Vec<String> = match driver {
            Driver::Systemd => vec![
                "kubepods.slice".into(),
                "kubepods-burstable.slice".into(),
                format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_")),
                format!("cri-containerd-{id}.scope"),
            ],
            Driver::Cgroupfs => vec!["kubepods".into(), "burstable".into(), format!("pod{uid}"), id.into()],
        };
        let nested: Vec<&str> = nested.iter().map(String::as_str).collect();
        let container = Cgroup::create_nested(node, &nested);
        let pod_path = container.path.rsplit_once('/').map(|(p, _)| p.to_string()).unwrap();
        Self { uid: uid.into(), id: id.into(), container, pod_path, logs: None }
    }

    /// The kubelet's log directories, naming the pod `namespace/name`.
    pub fn name(&mut self, namespace: &str, name: &str) {
        self.logs = Some(KubeletLogs::make((namespace, name, &self.uid), "main", &self.id));
    }
}

/// The kubelet's log directories for one container of one pod.
pub struct KubeletLogs {
    made: Vec<PathBuf>,
}

impl KubeletLogs {
    pub fn make((namespace, pod, uid): (&str, &str, &str), container: &str, id: &str) -> Self {
        let root = Path::new("/var/log");
        let mut made = Vec::new();
        for dir in ["pods", "containers"] {
            if !root.join(dir).exists() {
                made.push(root.join(dir));
            }
        }
        let pod_dir = root.join("pods").join(format!("{namespace}_{pod}_{uid}"));
        std::fs::create_dir_all(pod_dir.join(container)).unwrap();
        std::fs::create_dir_all(root.join("containers")).unwrap();
        std::fs::write(pod_dir.join(container).join("0.log"), "").unwrap();
        let link = root.join("containers").join(format!("{pod}_{namespace}_{container}-{id}.log"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(pod_dir.join(container).join("0.log"), &link).unwrap();
        made.extend([link, pod_dir]);
        Self { made }
    }
}

impl Drop for KubeletLogs {
    fn drop(&mut self) {
        for p in self.made.iter().rev() {
            let _ = if p.is_symlink() { std::fs::remove_file(p) } else { std::fs::remove_dir_all(p) };
        }
    }
}
