use gpumem_common::{event_type, kind};

use super::*;
use crate::decode::{Origin, Release};

/// A record of `event` (an `event_type`) for process `tgid` in cgroup `cg`.
fn rec(event: u32, tgid: u32, cg: u64, addr: u64, size: u64) -> Event {
    let origin = Origin { ts_ns: 0, pid: tgid, tid: tgid + 1, cgroup_id: cg, comm: "worker".into(), api: 1 };
    let c = Change { addr, size, kind: kind::DEVICE, device: Some(0), ..Change::default() };
    let body = match event {
        event_type::ALLOC => Body::Alloc(c),
        event_type::FREE => Body::Free(c),
        event_type::ALLOC_FAILED => Body::AllocFailed(c),
        event_type::EXIT => Body::Exit(Release { size, ..Release::default() }),
        event_type::EXEC => Body::Exec(Release { size, ..Release::default() }),
        other => panic!("no such record in these tests: {other}"),
    };
    Event { origin, body }
}

/// `e`'s change, to edit.
fn change(e: &mut Event) -> &mut Change {
    match &mut e.body {
        Body::Alloc(c) | Body::Free(c) | Body::AllocFailed(c) => c,
        other => panic!("not a change: {other:?}"),
    }
}

/// `e` as a record of process image `generation`.
fn image(mut e: Event, generation: u64) -> Event {
    match &mut e.body {
        Body::Alloc(c) | Body::Free(c) => c.generation = generation,
        Body::Exit(r) | Body::Exec(r) => r.generation = generation,
        other => panic!("no generation: {other:?}"),
    }
    e
}

#[test]
fn alloc_then_free_returns_to_zero() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 4096));
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x2000, 100));
    assert_eq!(l.process(10).unwrap().usage.bytes, 4196);
    assert_eq!(l.process(10).unwrap().comm, "worker");
    assert_eq!(l.cgroup(7).unwrap().bytes, 4196);
    l.apply(&rec(event_type::FREE, 10, 7, 0x1000, 4096));
    assert_eq!(l.process(10).unwrap().usage.bytes, 100);
    assert_eq!(l.process(10).unwrap().live_count(), 1);
    l.apply(&rec(event_type::FREE, 10, 7, 0x2000, 100));
    assert_eq!(l.process(10).unwrap().usage.bytes, 0);
    assert!(l.cgroup(7).is_none(), "empty cgroups leave the ledger");
}

#[test]
fn exit_uncharges_every_cgroup_the_process_charged() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
    l.apply(&rec(event_type::ALLOC, 10, 8, 0x2000, 20));
    l.apply(&rec(event_type::ALLOC, 11, 8, 0x1000, 5));
    l.apply(&rec(event_type::EXIT, 10, 8, 0, 30));
    assert!(l.process(10).is_none());
    assert!(l.cgroup(7).is_none());
    assert_eq!(l.cgroup(8).unwrap().bytes, 5);
    assert_eq!(l.process(11).unwrap().usage.bytes, 5);
}

#[test]
fn live_allocations_list_each_with_its_process_cgroup_and_device() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 5));
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x2000, 6));
    l.apply(&rec(event_type::FREE, 10, 7, 0x1000, 5));
    let live = l.live_allocations();
    assert_eq!(live.len(), 1);
    let a = live[0];
    assert_eq!((a.tgid, a.key.1, a.size, a.cgroup_id), (10, 0x2000, 6, 7));
}

#[test]
fn exec_forgets_the_old_image() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
    l.apply(&rec(event_type::EXEC, 10, 7, 0, 10));
    assert!(l.process(10).is_none());
    assert!(l.cgroup(7).is_none());
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 5));
    assert_eq!(l.process(10).unwrap().usage.bytes, 5);
}

#[test]
fn failed_and_untracked_records_change_nothing() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
    l.apply(&rec(event_type::ALLOC_FAILED, 10, 7, 0, 1 << 40));
    let mut untracked = rec(event_type::FREE, 10, 7, 0x9000, 0);
    change(&mut untracked).untracked = true;
    l.apply(&untracked);
    assert_eq!(l.process(10).unwrap().usage.bytes, 10);
    assert_eq!(l.cgroup(7).unwrap().bytes, 10);
}

#[test]
fn reused_address_replaces_the_stale_allocation() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
    let mut again = rec(event_type::ALLOC, 10, 7, 0x1000, 30);
    change(&mut again).replaced_stale = true;
    l.apply(&again);
    assert_eq!(l.process(10).unwrap().usage.bytes, 30);
    assert_eq!(l.cgroup(7).unwrap().bytes, 30);
}

/// Thread A frees 0x1000 (its record comes at the free's return), the
/// pool hands 0x1000 to thread B, whose allocation's record comes first:
/// A's allocation is held until its free's record, and B's stays.
#[test]
fn an_address_handed_out_again_before_its_frees_record_keeps_both_until_each_free() {
    for b_frees_first in [false, true] {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 30));
        assert_eq!(l.process(10).unwrap().usage.bytes, 40, "A is still held");
        assert_eq!(l.process(10).unwrap().live_count(), 1);
        let (first, then) = if b_frees_first { (30, 10) } else { (10, 30) };
        l.apply(&rec(event_type::FREE, 10, 7, 0x1000, first));
        assert_eq!(l.process(10).unwrap().usage.bytes, then, "b_frees_first {b_frees_first}");
        assert_eq!(l.cgroup(7).unwrap().bytes, then);
        l.apply(&rec(event_type::FREE, 10, 7, 0x1000, then));
        assert_eq!(l.process(10).unwrap().usage.bytes, 0, "b_frees_first {b_frees_first}");
        assert_eq!(l.process(10).unwrap().live_count(), 0);
        assert!(l.cgroup(7).is_none());
    }
}

#[test]
fn an_allocation_waiting_for_its_frees_record_goes_with_its_process() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
    l.apply(&rec(event_type::ALLOC, 10, 8, 0x1000, 30));
    assert_eq!(l.cgroup(7).unwrap().bytes, 10);
    l.apply(&rec(event_type::EXIT, 10, 7, 0, 40));
    assert!(l.process(10).is_none());
    assert!(l.cgroup(7).is_none() && l.cgroup(8).is_none(), "both cgroups uncharged");
}

#[test]
fn split_by_kind_and_device() {
    let mut l = Ledger::default();
    let mut a = rec(event_type::ALLOC, 10, 7, 0x1000, 10);
    change(&mut a).device = Some(1);
    l.apply(&a);
    let mut b = rec(event_type::ALLOC, 10, 7, 0x2000, 20);
    change(&mut b).kind = kind::MANAGED;
    l.apply(&b);
    let split = &l.process(10).unwrap().usage.split;
    assert_eq!(split.get(&(kind::DEVICE, Some(1))), Some(&10));
    assert_eq!(split.get(&(kind::MANAGED, Some(0))), Some(&20));
}

#[test]
fn records_of_a_released_image_arriving_after_its_exit_change_nothing() {
    let mut l = Ledger::default();
    l.apply(&image(rec(event_type::ALLOC, 10, 7, 0x1000, 10), 5));
    l.apply(&image(rec(event_type::EXIT, 10, 7, 0, 30), 5));
    // Charged (and released) before the exit, sent after it.
    l.apply(&image(rec(event_type::ALLOC, 10, 7, 0x2000, 20), 5));
    l.apply(&image(rec(event_type::FREE, 10, 7, 0x1000, 10), 5));
    assert!(l.process(10).is_none());
    assert!(l.cgroup(7).is_none());
    assert_eq!(l.late_records(), 2);
    // A later image of the same tgid counts again.
    l.apply(&image(rec(event_type::ALLOC, 10, 7, 0x2000, 20), 9));
    assert_eq!(l.process(10).unwrap().usage.bytes, 20);
    assert_eq!(l.cgroup(7).unwrap().bytes, 20);
}

#[test]
fn released_images_are_forgotten_a_while_after_release_once_many() {
    let mut l = Ledger::default();
    for tgid in 0..=RELEASED_PRUNE_ABOVE as u32 {
        l.apply(&image(rec(event_type::EXIT, tgid, 7, 0, 0), 1));
    }
    assert_eq!(l.released.len(), RELEASED_PRUNE_ABOVE + 1);
    let mut late = image(rec(event_type::EXIT, 99_999, 7, 0, 0), 1);
    late.origin.ts_ns = RELEASED_KEEP_NS;
    l.apply(&late);
    assert_eq!(l.released.len(), 1, "only the one released within the window is kept");
}

#[test]
fn top_holders_are_the_most_covered_bytes_first() {
    let mut l = Ledger::default();
    // Process 10 in cgroup 1: 5 MiB on device 0 and 1 MiB on device 1;
    // process 20 in cgroup 2: 3 MiB on device 0; process 30 in cgroup 2:
    // 3 MiB on device 0 (a tie with 20: the lower pid first).
    let mut on_1 = rec(event_type::ALLOC, 10, 1, 0x9000, 1 << 20);
    change(&mut on_1).device = Some(1);
    for e in [
        rec(event_type::ALLOC, 10, 1, 0x1000, 5 << 20),
        on_1,
        rec(event_type::ALLOC, 30, 2, 0x3000, 3 << 20),
        rec(event_type::ALLOC, 20, 2, 0x2000, 3 << 20),
    ] {
        l.apply(&e);
    }
    let top = l.top_holders(2, |a| a.device == Some(0));
    assert_eq!(top.total, 11 << 20);
    let procs: Vec<(u32, u64)> = top.processes.iter().map(|p| (p.0, p.3.bytes)).collect();
    assert_eq!(procs, [(10, 5 << 20), (20, 3 << 20)], "two listed, most first, ties by pid");
    let cgroups: Vec<(u64, u64)> = top.cgroups.iter().map(|c| (c.0, c.1.bytes)).collect();
    assert_eq!(cgroups, [(2, 6 << 20), (1, 5 << 20)]);
    assert_eq!(top.processes[0].3.split, [((kind::DEVICE, Some(0)), 5 << 20)].into_iter().collect());
    assert!(l.top_holders(5, |a| a.device == Some(7)).processes.is_empty());
}

#[test]
fn changes_count_only_what_moves_memory() {
    let mut l = Ledger::default();
    l.apply(&rec(event_type::ALLOC, 10, 1, 0x1000, 4096));
    l.apply(&rec(event_type::ALLOC_FAILED, 10, 1, 0, 4096));
    assert_eq!(l.changes(), 1, "a refused allocation changes nothing held");
    l.apply(&rec(event_type::FREE, 10, 1, 0x1000, 4096));
    assert_eq!(l.changes(), 2);
}
