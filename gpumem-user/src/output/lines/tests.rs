use gpumem_common::id;

use super::*;
use crate::decode::{Release, Taken};

fn origin(api: u32) -> Origin {
    Origin { ts_ns: 5, pid: 42, tid: 43, cgroup_id: 9, comm: "python3".into(), api }
}

fn alloc() -> Event {
    let c = Change {
        addr: 0x7f00_0000_1000,
        size: 4096,
        kind: kind::DEVICE,
        device: Some(0),
        proc_total: 4096,
        cgroup_total: 8192,
        result: Some(0),
        ..Change::default()
    };
    Event { origin: origin(id::MEM_ALLOC_V2), body: Body::Alloc(c) }
}

#[test]
fn alloc_record_renders_the_documented_fields() {
    let line = EventLine::new(&alloc(), Some("/a".into()), None).unwrap();
    let v = serde_json::to_value(Line::Event(line)).unwrap();
    let expect = serde_json::json!({
        "ts_ns": 5, "event": "alloc", "api": "cuMemAlloc_v2", "pid": 42, "tid": 43,
        "comm": "python3", "cgroup_id": 9, "cgroup": "/a", "device": 0, "kind": "device",
        "size": 4096, "addr": "0x7f0000001000", "result": 0, "proc_total": 4096,
        "cgroup_total": 8192
    });
    assert_eq!(v, expect);
}

#[test]
fn unknown_device_and_untracked_free_are_explicit() {
    let c = Change { untracked: true, ..Change::default() };
    let e = Event { origin: origin(id::MEM_FREE_V2), body: Body::Free(c) };
    let v = serde_json::to_value(EventLine::new(&e, None, None).unwrap()).unwrap();
    assert_eq!(v["device"], serde_json::Value::Null);
    assert_eq!(v["cgroup"], serde_json::Value::Null);
    assert_eq!(v["flags"], serde_json::json!(["untracked"]));
}

#[test]
fn a_free_recorded_at_its_entry_has_no_result() {
    let c = Change { size: 4096, ..Change::default() };
    let e = Event { origin: origin(id::MEM_FREE_V2), body: Body::Free(c) };
    let v = serde_json::to_value(EventLine::new(&e, None, None).unwrap()).unwrap();
    assert_eq!((v["event"].as_str(), &v["result"]), (Some("free"), &serde_json::Value::Null));
}

#[test]
fn exits_have_no_api_or_kind_and_calls_are_named_by_family() {
    let exit =
        Event { origin: origin(id::NONE), body: Body::Exit(Release { size: 30, ..Release::default() }) };
    let v = serde_json::to_value(EventLine::new(&exit, None, None).unwrap()).unwrap();
    assert_eq!(
        (v["event"].as_str(), v["api"].as_str(), v["kind"].as_str()),
        (Some("exit"), Some(""), Some(""))
    );
    assert_eq!(v["size"], 30);
    for (api, name) in [
        (id::MEM_POOL_TRIM_TO, "pool"),
        (id::CTX_DESTROY_V2, "context"),
        (id::IPC_OPEN_MEM_HANDLE_V2, "import"),
    ] {
        let e = Event { origin: origin(api), body: Body::Call(Change::default()) };
        let v = serde_json::to_value(EventLine::new(&e, None, None).unwrap()).unwrap();
        assert_eq!(v["event"], name);
    }
}

#[test]
fn every_line_reads_back_as_the_line_it_was() {
    let limit = LimitLine::new(
        &origin(id::MEM_ALLOC_V2),
        &Decision { slot: 0, request: 3, usage: 9, limit: 10, taken: Taken::Signal(9) },
        false,
        Some("/a".into()),
        ("cgroup:/a".into(), "signal:9".into()),
    );
    assert_eq!(limit.action, "signal:9");
    let dropped = DroppedLine { ts_ns: 1, records: 2, total: 3, ..DroppedLine::default() };
    let usage =
        UsageLine { ts_ns: 1, event: UsageEvent::Usage, scope: Scope::Cgroup, entry: StatusEntry::default() };
    let event = EventLine::new(&alloc(), Some("/a".into()), None).unwrap();
    for line in [Line::Event(event), Line::Limit(limit), Line::Usage(usage), Line::Dropped(dropped)] {
        let text = serde_json::to_string(&line).unwrap();
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line, "{text}");
    }
}

proptest::proptest! {
    #[test]
    fn an_address_is_written_as_format_writes_it(n in proptest::prelude::any::<u64>(), shift in 0u32..64) {
        for n in [n, n >> shift, 0] {
            proptest::prop_assert_eq!(hex(n), format!("{n:#x}"));
        }
    }
}
