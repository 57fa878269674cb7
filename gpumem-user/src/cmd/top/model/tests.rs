use super::*;
use crate::cmd::top::fixture::{report, GIB, MIB};

/// The rows' keys, in order.
fn keys(report: &TopReport, sort: SortBy, filter: Option<&str>) -> Vec<RowKey> {
    rows(report, sort, filter).iter().map(|r| r.key).collect()
}

use RowKey::{Group, Process};

#[test]
fn groups_come_with_their_processes_in_each_sort_order() {
    let r = report();
    let by_bytes = [Group(100), Process(4242), Process(4243), Group(200), Process(777)];
    assert_eq!(keys(&r, SortBy::Bytes, None), by_bytes);
    let by_pid = [Group(200), Process(777), Group(100), Process(4242), Process(4243)];
    assert_eq!(keys(&r, SortBy::Pid, None), by_pid);
    // `/system.slice/...` sorts before `ml/trainer-0/main`; dataloader
    // before python3.
    let by_name = [Group(200), Process(777), Group(100), Process(4243), Process(4242)];
    assert_eq!(keys(&r, SortBy::Name, None), by_name);
}

#[test]
fn rows_carry_names_bytes_and_kinds() {
    let r = report();
    let rows = rows(&r, SortBy::Bytes, None);
    assert_eq!(rows[0].name, "ml/trainer-0/main", "a pod by its names");
    assert_eq!(
        (rows[0].bytes, rows[0].kind_bytes("device"), rows[0].kind_bytes("host")),
        (3 * GIB, 2 * GIB, GIB)
    );
    assert_eq!((rows[1].name.as_str(), rows[1].pid(), rows[1].bytes), ("python3", Some(4242), 2 * GIB));
    assert_eq!(rows[3].name, "/system.slice/jupyter.service", "a cgroup by its path");
    assert_eq!(rows[4].kind_bytes("managed"), 512 * MIB);
    assert_eq!(kinds_in_use(&rows), ["device", "managed", "host", "vmm"], "array held by none");
    assert_eq!(kinds_in_use(&rows[..3]), ["device", "host"]);
    assert_eq!(kinds_in_use(&[]), ["device"], "device always");
}

#[test]
fn the_filter_matches_commands_cgroups_pods_namespaces_and_containers() {
    let r = report();
    let only = |f: &str| keys(&r, SortBy::Bytes, Some(f));
    assert_eq!(only("python"), [Group(100), Process(4242)], "a command: its group, only it");
    assert_eq!(only("PYTHON"), [Group(100), Process(4242)], "any case");
    let pod = [Group(100), Process(4242), Process(4243)];
    assert_eq!(only("ml"), pod, "a namespace: the whole pod");
    assert_eq!(only("trainer-0"), pod, "a pod");
    assert_eq!(only("main"), pod, "a container");
    assert_eq!(only("cri-containerd"), pod, "a cgroup path");
    assert_eq!(only("jupyter"), [Group(200), Process(777)]);
    assert_eq!(only("kernel"), [Group(200), Process(777)]);
    assert!(only("no such thing").is_empty());
    assert_eq!(only("").len(), 5, "an empty filter shows everything");
}

#[test]
fn a_process_in_no_listed_cgroup_gets_a_group_of_its_own() {
    let mut r = report();
    r.status.cgroups.retain(|c| c.cgroup_id != 200);
    let rows = rows(&r, SortBy::Bytes, None);
    let keys: Vec<_> = rows.iter().map(|r| r.key).collect();
    assert_eq!(keys[3..], [Group(200), Process(777)]);
    assert_eq!((rows[3].name.as_str(), rows[3].bytes), ("/system.slice/jupyter.service", 0));
}

#[test]
fn devices_show_nvml_beside_what_gpumem_holds_in_device_memory() {
    let r = report();
    let d = devices(&r);
    assert_eq!(d.len(), 2, "NVML's device 0, and device 1 that only a process names");
    assert_eq!(
        (d[0].index, d[0].name, d[0].used, d[0].total),
        (0, Some("NVIDIA H200"), Some(3 * GIB), Some(140 * GIB))
    );
    assert_eq!(d[0].held, 2 * GIB, "device memory, not host");
    assert_eq!((d[1].index, d[1].name, d[1].used, d[1].held), (1, None, None, 64 * MIB), "vmm, not managed");
}

#[test]
fn labels_name_pod_parts_the_kubelet_does_not() {
    let mut e = report().status.cgroups[0].clone();
    if let Some(c) = e.container.as_mut() {
        c.pod = None;
    }
    assert_eq!(group_label(&e), "ml/-/main");
    e.container = None;
    e.cgroup = None;
    assert_eq!(group_label(&e), "cgroup 100");
}
