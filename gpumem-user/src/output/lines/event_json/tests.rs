use std::{borrow::Cow, sync::Arc};

use proptest::prelude::*;

use super::{write, Placed};
use crate::{
    enrich::container::Container,
    output::{Caller, EventLine, Flag, Holder, Holders, Line, RecordEvent},
};

/// What serde_json writes for the line, and what [`write`] writes.
fn both(l: &EventLine) -> (String, String) {
    let serde = serde_json::to_string(&Line::Event(l.clone())).unwrap();
    let mut ours = bytes::BytesMut::new();
    write(&mut ours, l, &mut Placed::default()).unwrap();
    (serde, String::from_utf8(ours.to_vec()).unwrap())
}

fn line(comm: String, cgroup: Option<String>, device: Option<u32>, result: Option<u32>) -> EventLine {
    EventLine {
        caller: Caller {
            ts_ns: u64::MAX,
            event: RecordEvent::AllocFailed,
            api: Cow::Borrowed("cuMemAlloc_v2"),
            pid: 7,
            tid: u32::MAX,
            comm: comm.into(),
            cgroup_id: 0,
            cgroup: cgroup.map(Into::into),
        },
        container: None,
        device,
        kind: Cow::Borrowed("device"),
        size: 1 << 40,
        addr: "0x7f0000001000".into(),
        result,
        proc_total: 0,
        cgroup_total: 12345,
        flags: Vec::new(),
        holders: None,
    }
}

#[test]
fn the_rare_parts_are_written_as_serde_json_writes_them() {
    let mut l = line("tab\there \"q\" \\ é\u{7f}".into(), None, None, None);
    l.container = Some(Arc::new(Container {
        runtime: "docker".into(),
        id: "a".repeat(64),
        pod: Some("p".into()),
        ..Container::default()
    }));
    l.flags = vec![Flag::Untracked, Flag::CgroupSlotsFull];
    l.holders = Some(Box::new(Holders {
        device: Some(1),
        total: 10,
        processes: vec![Holder { pid: Some(3), bytes: 10, ..Holder::default() }],
        ..Holders::default()
    }));
    let (serde, ours) = both(&l);
    assert_eq!(ours, serde);
    // And it reads back as the same line.
    assert_eq!(serde_json::from_str::<Line>(&ours).unwrap(), Line::Event(l));
}

proptest! {
    #[test]
    fn any_event_line_is_written_byte_for_byte_as_serde_json_writes_it(
        comm in any::<String>(),
        cgroup in proptest::option::of(any::<String>()),
        device in proptest::option::of(any::<u32>()),
        result in proptest::option::of(any::<u32>()),
        event in 0usize..12,
        untracked in any::<bool>(),
    ) {
        let mut l = line(comm, cgroup, device, result);
        l.caller.event = [
            RecordEvent::Alloc, RecordEvent::Free, RecordEvent::AllocFailed, RecordEvent::Exit,
            RecordEvent::Exec, RecordEvent::Context, RecordEvent::Pool, RecordEvent::Import,
            RecordEvent::Export, RecordEvent::Multicast, RecordEvent::HostMapping, RecordEvent::Call,
        ][event];
        if untracked {
            l.flags.push(Flag::Untracked);
        }
        let (serde, ours) = both(&l);
        prop_assert_eq!(ours, serde);
    }

    #[test]
    fn any_container_is_written_byte_for_byte_as_serde_json_writes_it(
        runtime in any::<String>(),
        id in any::<String>(),
        optional in proptest::collection::vec(proptest::option::of(any::<String>()), 5),
    ) {
        let mut l = line("python".into(), Some("/kubepods.slice/x.scope".into()), Some(0), Some(0));
        let [pod_uid, qos, namespace, pod, name]: [Option<String>; 5] = optional.try_into().unwrap();
        l.container = Some(Arc::new(Container { runtime, id, pod_uid, qos, namespace, pod, name }));
        let (serde, ours) = both(&l);
        prop_assert_eq!(&ours, &serde);
        prop_assert_eq!(serde_json::from_str::<Line>(&ours).unwrap(), Line::Event(l));
    }

    #[test]
    fn lines_written_one_after_another_each_carry_their_own_cgroup_and_container(
        picks in proptest::collection::vec((0usize..3, 0usize..3), 1..12),
        paths in proptest::collection::vec(any::<String>(), 2),
    ) {
        // Lines of a few cgroups and containers, in any order, some the
        // very same allocations as the line before and some equal copies.
        let cgroups: [Option<Arc<str>>; 3] =
            [None, Some(paths[0].as_str().into()), Some(paths[1].as_str().into())];
        let pod = |id: &str| Some(Arc::new(Container {
            runtime: "containerd".into(),
            id: id.into(),
            pod: Some("p\"1".into()),
            ..Container::default()
        }));
        let containers = [None, pod("a"), pod("a")];
        let mut placed = Placed::default();
        for (cgroup, container) in picks {
            let mut l = line("python".into(), None, Some(0), Some(0));
            l.caller.cgroup = cgroups[cgroup].clone();
            l.container = containers[container].clone();
            let mut ours = bytes::BytesMut::new();
            write(&mut ours, &l, &mut placed).unwrap();
            let serde = serde_json::to_string(&Line::Event(l)).unwrap();
            prop_assert_eq!(String::from_utf8(ours.to_vec()).unwrap(), serde);
        }
    }
}
