//! A fixed `top` answer for the view's tests: a pod with two processes,
//! a service with one, two limits, a decision and a failure, and the
//! oldest allocations of two processes.
use crate::{
    enrich::container::Container,
    output::{
        Allocation, DeviceInfo, LimitStatus, ProcessAllocations, RecentEvent, RecentKind, SplitLine,
        StatusEntry, StatusReport, TopReport,
    },
};

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;
const SEC: u64 = 1_000_000_000;
pub const NOW: u64 = 1_000_000 * SEC;
pub const POD_CGROUP: &str =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abc.scope";

fn split(lines: &[(&str, u32, u64)]) -> Vec<SplitLine> {
    lines.iter().map(|&(kind, d, bytes)| SplitLine { kind: kind.into(), device: Some(d), bytes }).collect()
}

fn pod() -> Container {
    Container {
        runtime: "containerd".into(),
        id: "abc".into(),
        pod_uid: Some("1234".into()),
        namespace: Some("ml".into()),
        pod: Some("trainer-0".into()),
        name: Some("main".into()),
        ..Container::default()
    }
}

fn entry(pid: Option<u32>, comm: Option<&str>, cgroup_id: u64, lines: &[(&str, u32, u64)]) -> StatusEntry {
    let split = split(lines);
    let bytes = split.iter().map(|l| l.bytes).sum();
    let (cgroup, container) = match cgroup_id {
        100 => (POD_CGROUP.to_string(), Some(pod())),
        _ => ("/system.slice/jupyter.service".to_string(), None),
    };
    StatusEntry {
        pid,
        comm: comm.map(Into::into),
        cgroup_id,
        cgroup: Some(cgroup),
        container,
        bytes,
        kernel_bytes: bytes,
        split,
        ..StatusEntry::default()
    }
}

fn status() -> StatusReport {
    let processes = vec![
        entry(Some(4242), Some("python3"), 100, &[("device", 0, 2 * GIB)]),
        entry(Some(4243), Some("dataloader"), 100, &[("host", 0, GIB)]),
        entry(Some(777), Some("jupyter-kernel"), 200, &[("managed", 1, 512 * MIB), ("vmm", 1, 64 * MIB)]),
    ];
    let cgroups = vec![
        entry(None, None, 100, &[("device", 0, 2 * GIB), ("host", 0, GIB)]),
        entry(None, None, 200, &[("managed", 1, 512 * MIB), ("vmm", 1, 64 * MIB)]),
    ];
    let h200 = DeviceInfo {
        index: 0,
        name: Some("NVIDIA H200".into()),
        uuid: Some("GPU-0".into()),
        total_bytes: Some(140 * GIB),
        used_bytes: Some(3 * GIB),
        processes: vec![],
    };
    StatusReport {
        devices: vec![h200],
        nvml: true,
        processes,
        cgroups,
        records: 123_456,
        dropped: 7,
        ..StatusReport::default()
    }
}

fn limits() -> Vec<LimitStatus> {
    vec![
        LimitStatus {
            target: "cgroup:/kubepods.slice".into(),
            device: None,
            hard: 4 * GIB,
            soft: Some(3 * GIB),
            action: "deny".into(),
            view: "driver".into(),
            usage: 3 * GIB,
            source: None,
        },
        LimitStatus {
            target: "pid:777".into(),
            device: Some(1),
            hard: GIB,
            soft: None,
            action: "audit".into(),
            view: "driver".into(),
            usage: 576 * MIB,
            source: Some("env GPUMEM_LIMIT".into()),
        },
    ]
}

fn recent() -> Vec<RecentEvent> {
    let failure = RecentEvent {
        ts_ns: NOW - 65 * SEC,
        event: RecentKind::AllocFailed,
        pid: 777,
        comm: "jupyter-kernel".into(),
        cgroup: Some("/system.slice/jupyter.service".into()),
        api: "cuMemAllocManaged".into(),
        bytes: 80 * GIB,
        device: Some(1),
        result: Some(2),
        limit: None,
        limit_bytes: None,
        usage: None,
        action: None,
    };
    let decision = RecentEvent {
        ts_ns: NOW - 2 * SEC,
        event: RecentKind::Limit,
        pid: 4242,
        comm: "python3".into(),
        cgroup: Some(POD_CGROUP.into()),
        api: "cuMemAlloc_v2".into(),
        bytes: 2 * GIB,
        limit: Some("cgroup:/kubepods.slice".into()),
        limit_bytes: Some(4 * GIB),
        usage: Some(3 * GIB),
        action: Some("deny".into()),
        ..failure.clone()
    };
    vec![failure, decision]
}

fn allocation(age_secs: u64, size: u64, kind: &str, device: u32, api: &str, addr: u64) -> Allocation {
    Allocation {
        ts_ns: NOW - age_secs * SEC,
        age_ns: age_secs * SEC,
        size,
        kind: kind.into(),
        device: Some(device),
        api: api.into(),
        addr: format!("{addr:#x}"),
    }
}

/// The answer the view's tests draw.
pub fn report() -> TopReport {
    let oldest = vec![
        ProcessAllocations {
            pid: 4242,
            live: 3,
            oldest: vec![
                allocation(3723, GIB, "device", 0, "cuMemAlloc_v2", 0x7f00_0000_0000),
                allocation(10, 768 * MIB, "device", 0, "cuMemAllocAsync", 0x7f00_4000_0000),
                allocation(2, 256 * MIB, "device", 0, "cuMemAlloc_v2", 0x7f00_7000_0000),
            ],
        },
        ProcessAllocations {
            pid: 777,
            live: 2,
            oldest: vec![
                allocation(90, 512 * MIB, "managed", 1, "cuMemAllocManaged", 0x7e00_0000_0000),
                allocation(5, 64 * MIB, "vmm", 1, "cuMemCreate", 0x7e10_0000_0000),
            ],
        },
    ];
    TopReport { now_ns: NOW, status: status(), limits: limits(), recent: recent(), oldest }
}
