use proptest::prelude::*;

use super::*;

const UID: &str = "0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7";
const ID: &str = "4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

/// The kubelet's layout: the pod's directory with a container's
/// directory and log, and the link to it under containers/.
fn kubelet(root: &std::path::Path, namespace: &str, pod: &str, container: &str) {
    let pod_dir = root.join("pods").join(format!("{namespace}_{pod}_{UID}"));
    std::fs::create_dir_all(pod_dir.join(container)).unwrap();
    std::fs::write(pod_dir.join(container).join("0.log"), "").unwrap();
    std::fs::create_dir_all(root.join("containers")).unwrap();
    let link = root.join("containers").join(format!("{pod}_{namespace}_{container}-{ID}.log"));
    std::os::unix::fs::symlink(pod_dir.join(container).join("0.log"), link).unwrap();
}

fn in_pod() -> Container {
    Container {
        runtime: "containerd".into(),
        id: ID.into(),
        pod_uid: Some(UID.into()),
        ..Container::default()
    }
}

#[test]
fn a_pods_container_is_named_from_the_kubelets_directories() {
    let root = tempfile::tempdir().unwrap();
    kubelet(root.path(), "ml-team", "trainer-7d9f8-x2x4q", "pytorch");
    let mut c = in_pod();
    PodNames::at(root.path()).fill(&mut c);
    assert_eq!(c.namespace.as_deref(), Some("ml-team"));
    assert_eq!(c.pod.as_deref(), Some("trainer-7d9f8-x2x4q"));
    assert_eq!(c.name.as_deref(), Some("pytorch"));
}

#[test]
fn a_pod_made_just_after_another_was_missed_is_named_at_its_first_record() {
    let root = tempfile::tempdir().unwrap();
    let mut names = PodNames::at(root.path());
    let mut unknown = Container { id: "b".repeat(64), ..in_pod() };
    names.fill(&mut unknown);
    assert_eq!(unknown.pod, None, "nothing there yet");
    kubelet(root.path(), "ml-team", "trainer", "pytorch");
    let mut c = in_pod();
    names.fill(&mut c);
    assert_eq!((c.pod.as_deref(), c.name.as_deref()), (Some("trainer"), Some("pytorch")));
}

#[test]
fn what_the_directories_do_not_say_stays_absent() {
    let root = tempfile::tempdir().unwrap();
    kubelet(root.path(), "ml-team", "trainer", "pytorch");
    // Another container of the same pod, whose link is missing.
    let mut other = Container { id: "a".repeat(64), ..in_pod() };
    PodNames::at(root.path()).fill(&mut other);
    assert_eq!((other.pod.as_deref(), other.name), (Some("trainer"), None));
    // No kubelet directories at all.
    let empty = tempfile::tempdir().unwrap();
    let mut c = in_pod();
    PodNames::at(empty.path()).fill(&mut c);
    assert_eq!((c.namespace, c.pod, c.name), (None, None, None));
    // Not a pod: nothing is read or filled.
    let mut docker = Container { pod_uid: None, ..in_pod() };
    PodNames::at(root.path()).fill(&mut docker);
    assert_eq!(docker.name, None);
}

#[test]
fn names_that_are_not_the_kubelets_are_refused() {
    for bad in
        ["", "ns_pod", "ns_pod_notauid", "_pod_", "ns__0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7", "a_b_c_d"]
    {
        assert_eq!(parse_pod_dir(bad), None, "{bad:?}");
    }
    for bad in
        ["", "pod_ns_ctr.log", &format!("pod_ns_ctr-{ID}"), &format!("pod_ns-{ID}.log"), "p_n_c-xyz.log"]
    {
        assert_eq!(parse_container_log(bad), None, "{bad:?}");
    }
}

/// A DNS label: what namespaces, pod and container names are made of.
fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?"
}

proptest! {
    #[test]
    fn any_name_is_a_pod_dir_or_none(name in ".*") {
        let _ = parse_pod_dir(&name);
        let _ = parse_container_log(&name);
    }

    #[test]
    fn the_kubelets_names_are_read_exactly(ns in label(), pod in label(), ctr in label(), id in "[0-9a-f]{64}") {
        let dir = parse_pod_dir(&format!("{ns}_{pod}_{UID}")).unwrap();
        prop_assert_eq!(dir, PodDir { namespace: ns.clone(), pod: pod.clone(), uid: UID.into() });
        let log = parse_container_log(&format!("{pod}_{ns}_{ctr}-{id}.log")).unwrap();
        prop_assert_eq!(log, ContainerLog { pod, namespace: ns, container: ctr, id });
    }
}
