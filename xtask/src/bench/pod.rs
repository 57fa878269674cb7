//! A pod's container for the bench's loops, as a kubelet with the systemd
//! cgroup driver lays it out, under a cgroup of the bench's own: the
//! container's cgroup (`kubepods.slice/.../cri-containerd-ID.scope`) and
//! the log directory and link the agent names the pod and container from
//! (`/var/log/pods/NS_POD_UID/CONTAINER/`, `/var/log/containers/`). A
//! record of a process in a pod carries the container's runtime, id, pod
//! UID, QoS class, namespace, pod and name, so it costs the agent more
//! than one of a plain cgroup's. Everything made is removed when dropped;
//! what bears the bench's own names (its cgroups, the pod's log
//! directory, the link) is the bench's even where an interrupted run left
//! it, and goes too.
use std::path::{Path, PathBuf};

use anyhow::Context;

const UID: &str = "6e1f5d3a-0b1c-4d2e-8f30-62656e636801";
const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const NAMESPACE: &str = "gpumem-bench";
const POD: &str = "loops";
const CONTAINER: &str = "loop";

pub struct BenchPod {
    leaf: PathBuf,
    /// Outermost first: cgroups, then the log directories and link.
    cgroups: Vec<PathBuf>,
    logs: Vec<PathBuf>,
}

impl BenchPod {
    pub fn make() -> anyhow::Result<Self> {
        let mut pod = BenchPod { leaf: PathBuf::new(), cgroups: Vec::new(), logs: Vec::new() };
        let mut leaf = crate::util::cgroup2_root()?.join("gpumem-bench-node");
        let scopes = [
            "kubepods.slice".to_string(),
            "kubepods-burstable.slice".into(),
            format!("kubepods-burstable-pod{}.slice", UID.replace('-', "_")),
            format!("cri-containerd-{ID}.scope"),
        ];
        pod.make_cgroup(&leaf)?;
        for s in scopes {
            leaf = leaf.join(s);
            pod.make_cgroup(&leaf)?;
        }
        pod.leaf = leaf;
        let root = Path::new("/var/log");
        for dir in ["pods", "containers"] {
            pod.make_dir(&root.join(dir))?;
        }
        let pod_dir = root.join("pods").join(format!("{NAMESPACE}_{POD}_{UID}"));
        let _ = std::fs::remove_dir_all(&pod_dir);
        std::fs::create_dir_all(pod_dir.join(CONTAINER))
            .with_context(|| format!("the bench pod's directory {}", pod_dir.display()))?;
        pod.logs.push(pod_dir.clone());
        let log = pod_dir.join(CONTAINER).join("0.log");
        std::fs::write(&log, "").with_context(|| format!("the bench pod's log {}", log.display()))?;
        let link = root.join("containers").join(format!("{POD}_{NAMESPACE}_{CONTAINER}-{ID}.log"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&log, &link)
            .with_context(|| format!("the bench pod's link {}", link.display()))?;
        pod.logs.push(link);
        Ok(pod)
    }

    /// The container's cgroup, where the loops run.
    pub fn cgroup(&self) -> &Path {
        &self.leaf
    }

    /// Cgroup `dir`, made where an interrupted run left none.
    fn make_cgroup(&mut self, dir: &Path) -> anyhow::Result<()> {
        if !dir.exists() {
            std::fs::create_dir(dir).with_context(|| format!("the bench pod's cgroup {}", dir.display()))?;
        }
        self.cgroups.push(dir.to_path_buf());
        Ok(())
    }

    /// Directory `dir`, removed when dropped only if made here: a
    /// kubelet's own `/var/log/pods` stays.
    fn make_dir(&mut self, dir: &Path) -> anyhow::Result<()> {
        if !dir.exists() {
            std::fs::create_dir(dir)
                .with_context(|| format!("the bench pod's directory {}", dir.display()))?;
            self.logs.push(dir.to_path_buf());
        }
        Ok(())
    }
}

impl Drop for BenchPod {
    fn drop(&mut self) {
        // The loops have exited, so each cgroup is empty (an interrupted
        // run's too); innermost first.
        for d in self.cgroups.iter().rev() {
            if let Err(e) = std::fs::remove_dir(d) {
                eprintln!("xtask: bench: removing cgroup {}: {e}", d.display());
            }
        }
        for p in self.logs.iter().rev() {
            let removed = match p.is_symlink() {
                true => std::fs::remove_file(p),
                false => std::fs::remove_dir_all(p),
            };
            if let Err(e) = removed {
                eprintln!("xtask: bench: removing {}: {e}", p.display());
            }
        }
    }
}
