use proptest::prelude::*;

use super::*;
use crate::output::{
    Allocation, DeviceInfo, ProcessAllocations, RecentEvent, RecentKind, SplitLine, StatusEntry,
};

#[test]
fn requests_read_back_as_written() {
    let all = [
        Request::Status,
        Request::Top,
        Request::LimitList,
        Request::LimitSet { spec: "pid:1=1GiB".into() },
        Request::LimitClear { target: "pid:1".into() },
    ];
    for r in all {
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), r);
    }
    assert_eq!(serde_json::to_string(&Request::Status).unwrap(), r#"{"request":"status"}"#);
    assert_eq!(serde_json::to_string(&Request::Top).unwrap(), r#"{"request":"top"}"#);
}

/// A `top` answer with something in every part.
fn top_report() -> TopReport {
    let split = vec![SplitLine { kind: "device".into(), device: Some(0), bytes: 1 << 30 }];
    let process = StatusEntry {
        pid: Some(42),
        comm: Some("trainer".into()),
        cgroup_id: 7,
        cgroup: Some("/team-a".into()),
        bytes: 1 << 30,
        kernel_bytes: 1 << 30,
        split,
        ..StatusEntry::default()
    };
    let device = DeviceInfo {
        index: 0,
        name: Some("H200".into()),
        uuid: None,
        total_bytes: Some(140 << 30),
        used_bytes: Some(2 << 30),
        processes: vec![],
    };
    let status =
        StatusReport { devices: vec![device], processes: vec![process], records: 9, ..Default::default() };
    let limits = vec![LimitStatus {
        target: "cgroup:/team-a".into(),
        device: None,
        hard: 2 << 30,
        soft: Some(1 << 30),
        action: "deny".into(),
        view: "driver".into(),
        usage: 1 << 30,
        source: None,
    }];
    let recent = vec![RecentEvent {
        ts_ns: 5,
        event: RecentKind::Limit,
        pid: 42,
        comm: "trainer".into(),
        cgroup: Some("/team-a".into()),
        api: "cuMemAlloc_v2".into(),
        bytes: 4096,
        device: None,
        result: None,
        limit: Some("cgroup:/team-a".into()),
        limit_bytes: Some(2 << 30),
        usage: Some(1 << 30),
        action: Some("deny".into()),
    }];
    let allocation = Allocation {
        ts_ns: 3,
        age_ns: 7,
        size: 1 << 30,
        kind: "device".into(),
        device: Some(0),
        api: "cuMemAlloc_v2".into(),
        addr: "0x7f0000000000".into(),
    };
    let oldest = vec![ProcessAllocations { pid: 42, live: 1, oldest: vec![allocation] }];
    TopReport { now_ns: 10, status, limits, recent, oldest }
}

#[test]
fn answers_read_back_as_written() {
    let all = [
        Response::Top(Box::new(top_report())),
        Response::Top(Box::default()),
        Response::Status(Box::default()),
        Response::Limits(vec![]),
        Response::LimitSet { target: "pid:1".into(), action: "deny".into() },
        Response::LimitCleared { target: "pid:1".into() },
        Response::Error("no".into()),
    ];
    for r in all {
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), r);
    }
    let line = serde_json::to_string(&Response::Top(Box::new(top_report()))).unwrap();
    for field in [r#""event":"limit""#, r#""age_ns":7"#, r#""api":"cuMemAlloc_v2""#, r#""live":1"#] {
        assert!(line.contains(field), "{field} in {line}");
    }
}

fn any_recent() -> impl Strategy<Value = RecentEvent> {
    let kind =
        prop_oneof![Just(RecentKind::Limit), Just(RecentKind::LimitSoft), Just(RecentKind::AllocFailed)];
    (kind, any::<u64>(), any::<u32>(), ".{0,16}", proptest::option::of(".{0,24}"), any::<u64>())
        .prop_flat_map(|(event, ts_ns, pid, comm, cgroup, bytes)| {
            (proptest::option::of(any::<u32>()), proptest::option::of(".{0,8}")).prop_map(
                move |(result, action)| RecentEvent {
                    ts_ns,
                    event,
                    pid,
                    comm: comm.clone(),
                    cgroup: cgroup.clone(),
                    api: "cuMemAlloc_v2".into(),
                    bytes,
                    device: result.map(|r| r % 8),
                    result,
                    limit: action.clone().map(|a| format!("comm:{a}")),
                    limit_bytes: action.as_ref().map(|_| bytes / 2),
                    usage: None,
                    action,
                },
            )
        })
}

fn any_allocation() -> impl Strategy<Value = Allocation> {
    (any::<u64>(), any::<u64>(), any::<u64>(), proptest::option::of(any::<u32>()), ".{0,12}").prop_map(
        |(ts_ns, age_ns, size, device, api)| Allocation {
            ts_ns,
            age_ns,
            size,
            kind: "host".into(),
            device,
            api,
            addr: format!("{size:#x}"),
        },
    )
}

proptest! {
    /// Whatever a client sends, reading it is a request or an error,
    /// never a panic.
    #[test]
    fn any_line_is_a_request_or_an_error(line in ".{0,64}") {
        let _ = serde_json::from_str::<Request>(&line);
    }

    /// Whatever an agent answers, reading it is an answer or an error,
    /// never a panic.
    #[test]
    fn any_line_is_an_answer_or_an_error(line in ".{0,96}") {
        let _ = serde_json::from_str::<Response>(&line);
    }

    /// Any `top` answer is one line and reads back as written.
    #[test]
    fn any_top_answer_reads_back(
        now_ns in any::<u64>(),
        recent in proptest::collection::vec(any_recent(), 0..4),
        oldest in proptest::collection::vec(any_allocation(), 0..4),
        pid in any::<u32>(),
    ) {
        let live = oldest.len() as u64;
        let report = TopReport {
            now_ns,
            recent,
            oldest: vec![ProcessAllocations { pid, live, oldest }],
            ..TopReport::default()
        };
        let answer = Response::Top(Box::new(report));
        let line = serde_json::to_string(&answer).unwrap();
        prop_assert!(!line.contains('\n'));
        prop_assert_eq!(serde_json::from_str::<Response>(&line).unwrap(), answer);
    }
}
