//! The pods on this node, from the kubelet's cgroup layout: each pod's
//! cgroup under `kubepods`, with either cgroup driver:
//!
//! - cgroupfs: `/kubepods/pod<uid>` (guaranteed),
//!   `/kubepods/burstable/pod<uid>`, `/kubepods/besteffort/pod<uid>`;
//! - systemd: `/kubepods.slice/kubepods-pod<uid_>.slice`,
//!   `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`,
//!   and the same for besteffort.
//!
//! `kubepods` is looked for at the cgroup2 root and one level below it
//! (a kubelet started with `--cgroup-root`).
use std::path::Path;

use super::container::segment_pod;

/// A pod's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroup {
    /// The pod's UID, with dashes.
    pub uid: String,
    /// Its cgroup's path from the cgroup2 root (`/kubepods.slice/...`).
    pub path: String,
    /// Its cgroup's id (0 if it could not be read: gone meanwhile).
    pub id: u64,
}

/// Every pod cgroup under `root` (the cgroup2 mount), in path order.
pub fn pod_cgroups(root: &Path) -> Vec<PodCgroup> {
    let mut out = Vec::new();
    for kubepods in kubepods_dirs(root) {
        for child in subdirs(root, &kubepods) {
            let name = child.rsplit('/').next().unwrap_or_default();
            match segment_pod(name) {
                Some(uid) => out.push(PodCgroup { uid, id: id_of(root, &child), path: child.clone() }),
                None if is_qos(name) => out.extend(subdirs(root, &child).into_iter().filter_map(|p| {
                    let uid = segment_pod(p.rsplit('/').next().unwrap_or_default())?;
                    Some(PodCgroup { uid, id: id_of(root, &p), path: p })
                })),
                None => {}
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The cgroups pods are made in: each `kubepods` cgroup and its QoS
/// cgroups (a pod's cgroup is the one below the deepest of them).
pub fn parent_cgroups(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for kubepods in kubepods_dirs(root) {
        let qos =
            subdirs(root, &kubepods).into_iter().filter(|p| is_qos(p.rsplit('/').next().unwrap_or_default()));
        out.extend(qos);
        out.push(kubepods);
    }
    out.sort();
    out
}

/// Cgroup `path`'s id (0 if it cannot be read).
pub fn id_of(root: &Path, path: &str) -> u64 {
    super::cgroup::cgroup_id(&root.join(path.trim_start_matches('/'))).unwrap_or(0)
}

/// `burstable`, `besteffort`, or their systemd slices.
fn is_qos(name: &str) -> bool {
    matches!(name, "burstable" | "besteffort" | "kubepods-burstable.slice" | "kubepods-besteffort.slice")
}

/// The `kubepods` cgroups: at the root, and one level below it.
fn kubepods_dirs(root: &Path) -> Vec<String> {
    let is_kubepods = |p: &str| matches!(p.rsplit('/').next(), Some("kubepods" | "kubepods.slice"));
    let top = subdirs(root, "");
    let mut out: Vec<String> = top.iter().filter(|p| is_kubepods(p)).cloned().collect();
    for dir in top.iter().filter(|p| !is_kubepods(p)) {
        out.extend(subdirs(root, dir).into_iter().filter(|p| is_kubepods(p)));
    }
    out
}

/// The directories in cgroup `path` (from `root`), as cgroup paths.
fn subdirs(root: &Path, path: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join(path.trim_start_matches('/'))) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| format!("{path}/{}", e.file_name().to_string_lossy()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7";
    const B: &str = "1a2b3c4d-5e6f-4081-92a3-b4c5d6e7f809";
    const C: &str = "2b3c4d5e-6f70-4192-a3b4-c5d6e7f80910";

    fn layout(root: &Path, dirs: &[String]) {
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
    }

    #[test]
    fn pods_of_each_qos_class_with_either_driver() {
        let u = |uid: &str| uid.replace('-', "_");
        let systemd = tempfile::tempdir().unwrap();
        layout(
            systemd.path(),
            &[
                format!("kubepods.slice/kubepods-pod{}.slice/cri-containerd-abc.scope", u(A)),
                format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice", u(B)),
                format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice", u(C)),
                "system.slice/containerd.service".into(),
            ],
        );
        let got: Vec<(String, String)> =
            pod_cgroups(systemd.path()).into_iter().map(|p| (p.uid, p.path)).collect();
        assert_eq!(
            got,
            [
                (
                    C.into(),
                    format!(
                        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
                        u(C)
                    )
                ),
                (
                    B.into(),
                    format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice", u(B))
                ),
                (A.into(), format!("/kubepods.slice/kubepods-pod{}.slice", u(A))),
            ]
        );
        let cgroupfs = tempfile::tempdir().unwrap();
        layout(
            cgroupfs.path(),
            &[
                format!("kubepods/pod{A}/abc"),
                format!("kubepods/burstable/pod{B}"),
                format!("kubepods/besteffort/pod{C}"),
            ],
        );
        let got: Vec<String> = pod_cgroups(cgroupfs.path()).into_iter().map(|p| p.path).collect();
        assert_eq!(
            got,
            [
                format!("/kubepods/besteffort/pod{C}"),
                format!("/kubepods/burstable/pod{B}"),
                format!("/kubepods/pod{A}")
            ]
        );
    }

    #[test]
    fn kubepods_one_level_down_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        layout(
            root.path(),
            &[format!("node/kubepods/pod{A}"), format!("a/b/kubepods/pod{B}"), format!("kubepods-x/pod{C}")],
        );
        let got: Vec<String> = pod_cgroups(root.path()).into_iter().map(|p| p.path).collect();
        assert_eq!(got, [format!("/node/kubepods/pod{A}")]);
        assert!(pod_cgroups(Path::new("/nonexistent")).is_empty());
        assert_eq!(parent_cgroups(root.path()), ["/node/kubepods"]);
        layout(root.path(), &["node/kubepods/burstable".into(), "node/kubepods/besteffort".into()]);
        assert_eq!(
            parent_cgroups(root.path()),
            ["/node/kubepods", "/node/kubepods/besteffort", "/node/kubepods/burstable"]
        );
    }
}
