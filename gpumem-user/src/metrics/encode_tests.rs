use super::*;
use crate::{
    enrich::container::Container,
    metrics::counts::EventCounts,
    output::{DeviceInfo, DriverProcess, LimitStatus, StatusReport},
};

fn split(kind: &str, device: Option<u32>, bytes: u64) -> SplitLine {
    SplitLine { kind: kind.into(), device, bytes }
}

fn scrape() -> Scrape {
    let container = Container {
        runtime: "containerd".into(),
        id: "ab".repeat(32),
        pod_uid: Some("0f1e2d3c-0000-4000-8000-000000000001".into()),
        qos: Some("burstable".into()),
        namespace: Some("ml".into()),
        pod: Some("trainer-0".into()),
        name: None,
    };
    let trainer = StatusEntry {
        pid: Some(4242),
        comm: Some("train\"er".into()),
        cgroup: Some("/kubepods/pod-x/ctr".into()),
        container: Some(container.clone()),
        split: vec![split("device", Some(0), 3 << 20), split("host", None, 4096)],
        ..StatusEntry::default()
    };
    let cgroup = StatusEntry {
        cgroup: Some("/kubepods/pod-x/ctr".into()),
        container: Some(container),
        split: vec![split("device", Some(0), 3 << 20)],
        ..StatusEntry::default()
    };
    let mut counts = EventCounts::default();
    counts.decision("cgroup:/team", false, "deny");
    counts.decision("cgroup:/team", false, "deny");
    counts.failure(Some(0), 2);
    Scrape {
        status: StatusReport {
            libraries: vec!["/usr/lib/libcuda.so.1".into()],
            libcuda_attached: true,
            nvml: true,
            devices: vec![DeviceInfo {
                index: 0,
                name: Some("Sim".into()),
                uuid: Some("GPU-1".into()),
                total_bytes: Some(1 << 30),
                used_bytes: Some(5 << 20),
                processes: vec![DriverProcess { pid: 4242, used_bytes: Some(5 << 20) }],
            }],
            processes: vec![trainer],
            cgroups: vec![cgroup],
            records: 17,
            dropped: 3,
            unwritten: 1,
            ..StatusReport::default()
        },
        limits: limits(),
        counts,
        malformed: 2,
        probes: 40,
    }
}

/// An operator's limit and one made for a pod.
fn limits() -> Vec<LimitStatus> {
    let limit = |target: &str, soft, usage, source: Option<&str>| LimitStatus {
        target: target.into(),
        device: None,
        hard: 1 << 30,
        soft,
        action: "deny".into(),
        view: "driver".into(),
        usage,
        source: source.map(Into::into),
    };
    vec![
        limit("cgroup:/team", Some(1 << 29), 3 << 20, None),
        limit("cgroup:/k/pod-a", None, 0, Some("namespace:ml, pod ml/a")),
    ]
}

/// The sample lines of the page, without HELP/TYPE/UNIT comments.
fn samples(page: &str) -> Vec<&str> {
    page.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn every_series_carries_the_scrape_exactly() {
    let page = encode(&scrape()).unwrap();
    let ctr = format!(
        r#"cgroup="/kubepods/pod-x/ctr",container_id="{}",runtime="containerd",pod_uid="0f1e2d3c-0000-4000-8000-000000000001",namespace="ml",pod="trainer-0",container="""#,
        "ab".repeat(32)
    );
    let expected = [
        format!(
            r#"gpumem_process_memory_bytes{{pid="4242",comm="train\"er",{ctr},device="0",kind="device"}} 3145728"#
        ),
        format!(
            r#"gpumem_process_memory_bytes{{pid="4242",comm="train\"er",{ctr},device="",kind="host"}} 4096"#
        ),
        format!(r#"gpumem_cgroup_memory_bytes{{{ctr},device="0",kind="device"}} 3145728"#),
        r#"gpumem_limit_bytes{target="cgroup:/team",device="",source="",level="hard",action="deny"} 1073741824"#
            .into(),
        r#"gpumem_limit_bytes{target="cgroup:/team",device="",source="",level="soft",action="deny"} 536870912"#
            .into(),
        r#"gpumem_limit_usage_bytes{target="cgroup:/team",device="",source=""} 3145728"#.into(),
        r#"gpumem_limit_usage_bytes{target="cgroup:/k/pod-a",device="",source="namespace:ml, pod ml/a"} 0"#.into(),
        r#"gpumem_limit_decisions_total{target="cgroup:/team",level="hard",action="deny"} 2"#.into(),
        r#"gpumem_alloc_failures_total{device="0",result="2"} 1"#.into(),
        "gpumem_records_total 17".into(),
        r#"gpumem_records_lost_total{reason="ring_full"} 3"#.into(),
        r#"gpumem_records_lost_total{reason="unwritten"} 1"#.into(),
        "gpumem_records_malformed_total 2".into(),
        "gpumem_libraries_attached 1".into(),
        "gpumem_libcuda_attached 1".into(),
        "gpumem_probes_attached 40".into(),
        "gpumem_nvml_available 1".into(),
        r#"gpumem_device_memory_total_bytes{device="0",uuid="GPU-1",name="Sim"} 1073741824"#.into(),
        r#"gpumem_driver_process_memory_bytes{pid="4242",device="0"} 5242880"#.into(),
        // 5 MiB by the driver, 3 MiB of device memory seen (host memory
        // is not on the device).
        r#"gpumem_process_unaccounted_memory_bytes{pid="4242",device="0"} 2097152"#.into(),
    ];
    let got = samples(&page);
    for line in &expected {
        assert!(got.contains(&line.as_str()), "missing `{line}` in:\n{page}");
    }
    assert!(page.ends_with("# EOF\n"), "an OpenMetrics page ends with # EOF");
}

#[test]
fn a_process_that_holds_nothing_has_no_series() {
    let mut s = scrape();
    s.status.processes.clear();
    s.status.cgroups.clear();
    let page = encode(&s).unwrap();
    assert!(samples(&page).iter().all(|l| !l.contains("4242\",comm") && !l.contains("pod-x")), "{page}");
}

#[test]
fn without_nvml_there_are_no_device_series() {
    let mut s = scrape();
    s.status.nvml = false;
    s.status.devices.clear();
    let page = encode(&s).unwrap();
    assert!(samples(&page).iter().all(|l| !l.starts_with("gpumem_device_") && !l.contains("unaccounted")));
    assert!(samples(&page).contains(&"gpumem_nvml_available 0"));
}
