//! Containers and pods from a cgroup v2 path.
//!
//! The container runtimes and the kubelet name cgroups in a few known
//! shapes (systemd and cgroupfs drivers differ); the deepest match wins, so
//! a container nested in a pod's cgroup is named, not the pod.
use serde::{Deserialize, Serialize};

/// What a cgroup path says about the container that owns it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// `docker`, `containerd`, `cri-o` or `podman`.
    pub runtime: String,
    /// The full container id (64 hex digits).
    pub id: String,
    /// The Kubernetes pod UID, when the path is under `kubepods`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// `guaranteed`, `burstable` or `besteffort`, for pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// The pod's namespace and name, and the container's name, from the
    /// kubelet's log directories (`enrich::pods`); absent where they do not
    /// say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Container {
    /// Whether the kubelet's directories have said all its names (a pod's
    /// container: its namespace, pod and name).
    pub fn named(&self) -> bool {
        self.namespace.is_some() && self.pod.is_some() && self.name.is_some()
    }
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The runtime and container id one path segment names, if any.
fn segment_container(seg: &str) -> Option<(&'static str, &str)> {
    let seg = seg.strip_suffix(".scope").unwrap_or(seg);
    const PREFIXES: &[(&str, &str)] = &[
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
    ];
    for (prefix, runtime) in PREFIXES {
        if let Some(id) = seg.strip_prefix(prefix) {
            return is_id(id).then_some((*runtime, id));
        }
    }
    None
}

/// The pod UID a segment names (`pod<uid>`, or the systemd form
/// `kubepods-<qos>-pod<uid_with_underscores>.slice`).
pub(crate) fn segment_pod(seg: &str) -> Option<String> {
    let seg = seg.strip_suffix(".slice").unwrap_or(seg);
    let uid = seg.rsplit_once("-pod").map(|(_, u)| u).or_else(|| seg.strip_prefix("pod"))?;
    let uid = uid.replace('_', "-");
    (uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')).then_some(uid)
}

/// Parses a cgroup v2 path (relative to the cgroup2 root).
pub fn parse(path: &str) -> Option<Container> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut found: Option<(usize, &'static str, &str)> = None;
    for (i, seg) in segs.iter().enumerate() {
        if let Some((runtime, id)) = segment_container(seg) {
            found = Some((i, runtime, id));
        }
    }
    // cgroupfs drivers: a bare id under a runtime or pod directory.
    if found.is_none() {
        for (i, seg) in segs.iter().enumerate().skip(1) {
            if is_id(seg) {
                let parent = segs[i - 1];
                let runtime = match parent {
                    "docker" => "docker",
                    "libpod_parent" => "podman",
                    p if segment_pod(p).is_some() => "containerd",
                    _ => continue,
                };
                found = Some((i, runtime, seg));
            }
        }
    }
    let (at, runtime, id) = found?;
    let kube = segs.iter().take(at).any(|s| s.starts_with("kubepods"));
    let pod_uid = if kube { segs[..at].iter().rev().find_map(|s| segment_pod(s)) } else { None };
    let qos = pod_uid.as_ref().map(|_| {
        let joined = segs[..at].join("/");
        if joined.contains("burstable") {
            "burstable"
        } else if joined.contains("besteffort") {
            "besteffort"
        } else {
            "guaranteed"
        }
        .to_string()
    });
    Some(Container { runtime: runtime.to_string(), id: id.to_string(), pod_uid, qos, ..Container::default() })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ID: &str = "4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";
    const UID: &str = "0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7";

    fn c(runtime: &str, pod: Option<&str>, qos: Option<&str>) -> Option<Container> {
        Some(Container {
            runtime: runtime.into(),
            id: ID.into(),
            pod_uid: pod.map(Into::into),
            qos: qos.map(Into::into),
            ..Container::default()
        })
    }

    #[test]
    fn docker_systemd_and_cgroupfs() {
        assert_eq!(parse(&format!("/system.slice/docker-{ID}.scope")), c("docker", None, None));
        assert_eq!(parse(&format!("/docker/{ID}")), c("docker", None, None));
    }

    #[test]
    fn kubernetes_containerd_systemd_burstable() {
        let uid = UID.replace('-', "_");
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/cri-containerd-{ID}.scope"
        );
        assert_eq!(parse(&p), c("containerd", Some(UID), Some("burstable")));
    }

    #[test]
    fn kubernetes_cri_o_besteffort_and_guaranteed() {
        let uid = UID.replace('-', "_");
        let p = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice/crio-{ID}.scope"
        );
        assert_eq!(parse(&p), c("cri-o", Some(UID), Some("besteffort")));
        let p = format!("/kubepods.slice/kubepods-pod{uid}.slice/crio-{ID}.scope");
        assert_eq!(parse(&p), c("cri-o", Some(UID), Some("guaranteed")));
    }

    #[test]
    fn kubernetes_cgroupfs_driver() {
        assert_eq!(
            parse(&format!("/kubepods/burstable/pod{UID}/{ID}")),
            c("containerd", Some(UID), Some("burstable"))
        );
        assert_eq!(
            parse(&format!("/kubepods/pod{UID}/{ID}")),
            c("containerd", Some(UID), Some("guaranteed"))
        );
    }

    #[test]
    fn podman_rootless_and_rootful() {
        let p = format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope");
        assert_eq!(parse(&p), c("podman", None, None));
        assert_eq!(parse(&format!("/machine.slice/libpod-{ID}.scope/container")), c("podman", None, None));
        assert_eq!(parse(&format!("/libpod_parent/{ID}")), c("podman", None, None));
    }

    #[test]
    fn plain_paths_are_no_container() {
        assert_eq!(parse("/"), None);
        assert_eq!(parse("/user.slice/user-1000.slice/session-3.scope"), None);
        assert_eq!(parse("/system.slice/docker.service"), None);
        assert_eq!(parse("/kubepods.slice/kubepods-burstable.slice"), None);
        assert_eq!(parse("/docker/not-an-id"), None);
        assert_eq!(parse(&format!("/system.slice/crio-conmon-{ID}.scope")), None);
    }

    /// A path segment: plain names, ids bare or with a runtime's prefix,
    /// pod directories in either driver's form, and the kubelet's slices.
    fn segment() -> impl Strategy<Value = String> {
        let id = "[0-9a-f]{64}";
        prop_oneof![
            "[a-z0-9@._-]{0,12}",
            id.prop_map(|i| i.to_string()),
            (
                prop::sample::select(vec!["docker-", "cri-containerd-", "crio-", "libpod-", "crio-conmon-"]),
                id
            )
                .prop_map(|(p, i)| format!("{p}{i}.scope")),
            "pod[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            prop::sample::select(vec!["kubepods", "kubepods.slice", "burstable", "docker", "libpod_parent"])
                .prop_map(String::from),
        ]
    }

    proptest! {
        /// Whatever the path, the answer is a container or none, never a
        /// panic; a container's id is 64 hex digits found in the path, and
        /// a pod's uid is a 36-character uuid.
        #[test]
        fn any_path_is_a_container_or_none(segs in prop::collection::vec(segment(), 0..7)) {
            let path = format!("/{}", segs.join("/"));
            if let Some(c) = parse(&path) {
                prop_assert!(is_id(&c.id) && path.contains(&c.id), "{path}: {c:?}");
                if let Some(uid) = &c.pod_uid {
                    prop_assert_eq!(uid.len(), 36);
                    prop_assert!(c.qos.is_some());
                }
            }
        }

        /// The kubelet's systemd layout names the container, its runtime,
        /// the pod and the QoS class exactly, whatever the ids.
        #[test]
        fn kubelet_systemd_paths_name_container_pod_and_qos(
            id in "[0-9a-f]{64}",
            uid in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            qos in prop::sample::select(vec!["guaranteed", "burstable", "besteffort"]),
            runtime in prop::sample::select(vec![("cri-containerd-", "containerd"), ("crio-", "cri-o")]),
        ) {
            let pod = format!("pod{}.slice", uid.replace('-', "_"));
            let path = if qos == "guaranteed" {
                format!("/kubepods.slice/kubepods-{pod}/{}{id}.scope", runtime.0)
            } else {
                format!("/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-{pod}/{}{id}.scope", runtime.0)
            };
            let want = Container {
                runtime: runtime.1.into(),
                id,
                pod_uid: Some(uid),
                qos: Some(qos.into()),
                ..Container::default()
            };
            prop_assert_eq!(parse(&path), Some(want));
        }
    }
}
