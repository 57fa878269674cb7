//! The agent's totals equal the workload's ground truth exactly, per
//! process and per cgroup, at checkpoints and after exit.
use gpumem::output::{Flag, RecordEvent};
use gpumem_tests::harness::*;

#[test]
fn basic_workload_is_accounted_exactly_and_released_at_exit() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("basic");
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let pid = w.pid();

    for name in ["allocated", "freed"] {
        let c = w.checkpoint();
        assert_eq!(c.checkpoint, name);
        agent.wait_for_checkpoint(&c);
        let s = agent.status();
        assert_process_holds(&s, pid, c.held);
        assert_cgroup_holds(&s, &cg, c.held);
        assert_eq!(proc_entry(&s, pid).unwrap().cgroup.as_deref(), Some(cg.path.as_str()));
        // The card's own count: the same bytes, and its primary context.
        assert_eq!(card_held(pid, 0), (c.held, CONTEXT_COST));
        // NVML (the simulated one, reading the card) names the process
        // with both; what gpumem did not see allocated is the context.
        let d = &s.devices[0];
        let driver = d.processes.iter().find(|p| p.pid == pid).and_then(|p| p.used_bytes);
        assert_eq!(driver, Some(c.held + CONTEXT_COST), "{d:?}");
        assert_eq!(driver.unwrap() - s.resident(pid, 0), CONTEXT_COST, "unaccounted: the context");
        w.resume();
    }
    w.finish();

    let lines = agent.wait_for_exit(pid);
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);

    // Every record reads back as the documented schema, and the stream's
    // own totals add up: the exit released what was still held.
    let exit = lines.events(pid, RecordEvent::Exit)[0];
    let (allocs, frees) = (lines.events(pid, RecordEvent::Alloc), lines.events(pid, RecordEvent::Free));
    let sum = |v: &[&gpumem::output::EventLine]| v.iter().map(|l| l.size).sum::<u64>();
    assert_eq!(exit.size, sum(&allocs) - sum(&frees));
    for l in allocs.iter().chain(frees.iter()) {
        assert_eq!(l.caller.cgroup.as_deref(), Some(cg.path.as_str()));
        assert_eq!(l.caller.cgroup_id, cg.id);
        assert_eq!(l.caller.comm, "gpumem-workload");
        assert_eq!(l.device, Some(0), "the workload's primary context is device 0");
        assert!(l.addr.starts_with("0x"));
        assert!(l.caller.ts_ns > 0 && l.caller.tid > 0 && l.kind == "device", "{l:?}");
    }
    assert_eq!(allocs.last().unwrap().caller.api, "cuMemAlloc_v2");
    assert_eq!(frees.last().unwrap().caller.api, "cuMemFree_v2");

    let (status, lines) = agent.stop();
    assert!(status.success(), "agent exit: {status}");
    assert_eq!(lines.lost(), 0, "records were lost");
}

#[test]
fn failed_allocation_is_reported_and_charges_nothing() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("oom");
    // An 11 MiB card: its context takes 2, then 3 MiB chunks: three fit,
    // the fourth is refused.
    let card = SimCard::new(11 << 20);
    let mut w =
        Workload::spawn(&["--scenario", "oom", "--size", "3145728", "--pause"], Some(&cg), &card.env());
    let pid = w.pid();
    let full = w.checkpoint();
    assert_eq!((full.allocs, full.failed, full.held), (3, 1, 9 << 20));
    let lines = agent.wait_for_checkpoint(&full);
    let failed = lines.events(pid, RecordEvent::AllocFailed)[0];
    assert_eq!(failed.result, Some(2), "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(failed.size, 3145728);
    assert_eq!(failed.proc_total, 9 << 20, "the refused call charged nothing");
    let s = agent.status();
    assert_process_holds(&s, pid, 9 << 20);
    assert_cgroup_holds(&s, &cg, 9 << 20);
    assert_eq!(card.held(pid, 0), (9 << 20, CONTEXT_COST), "the card's own count");
    w.resume();
    let empty = w.checkpoint();
    agent.wait_for_checkpoint(&empty);
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);
    w.resume();
    w.finish();
}

#[test]
fn forked_child_holds_nothing_of_its_parent() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("fork");
    let mut w = Workload::spawn(&["--scenario", "fork", "--pause"], Some(&cg), &[]);
    let parent_pid = w.pid();
    let child = w.checkpoint();
    assert_eq!(child.checkpoint, "child");
    assert_ne!(child.pid, parent_pid);
    let parent = w.checkpoint();
    assert_eq!(parent.checkpoint, "parent");
    let lines = agent.wait_for("the child's records and exit", |l| {
        l.count(child.pid, RecordEvent::Alloc) as u64 == child.allocs
            && l.count(child.pid, RecordEvent::Exit) == 1
    });
    // The child's free of the parent's address matched nothing it held.
    let untracked = lines.events(child.pid, RecordEvent::Free)[0];
    assert_eq!(untracked.flags, [Flag::Untracked]);
    assert_eq!(untracked.size, 0);
    agent.wait_for_checkpoint(&parent);
    let s = agent.status();
    assert_process_holds(&s, parent_pid, parent.held);
    assert_process_holds(&s, child.pid, 0);
    assert_cgroup_holds(&s, &cg, parent.held);
    w.resume();
    w.finish();
}

#[test]
fn device_comes_from_the_threads_current_context() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let mut w =
        Workload::spawn(&["--scenario", "threads", "--device", "1", "--threads", "3", "--pause"], None, &[]);
    let pid = w.pid();
    let c = w.checkpoint();
    let lines = agent.wait_for_checkpoint(&c);
    let mine = lines.events(pid, RecordEvent::Alloc);
    assert!(!mine.is_empty());
    for l in &mine {
        assert_eq!(l.device, Some(1), "every thread set device 1's primary context current: {l:?}");
    }
    let s = agent.status();
    let split = &proc_entry(&s, pid).unwrap().split;
    assert_eq!(split.len(), 1, "{split:?}");
    assert_eq!((split[0].device, split[0].kind.as_str(), split[0].bytes), (Some(1), "device", c.held));
    assert_every_call_whole(&s);
    w.run_to_end();
}

#[test]
fn exec_releases_what_the_old_image_held() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("exec");
    let mut w = Workload::spawn(&["--scenario", "exec", "--pause"], Some(&cg), &[]);
    let pid = w.pid();
    let before = w.checkpoint();
    assert_eq!((before.checkpoint.as_str(), before.held), ("before-exec", 3 << 20));
    agent.wait_for_checkpoint(&before);
    assert_process_holds(&agent.status(), pid, 3 << 20);
    w.resume();
    // The same pid, a new image, its own truth (counts start again).
    let after = w.checkpoint();
    assert_eq!((after.checkpoint.as_str(), after.pid), ("allocated", pid));
    let lines = agent.wait_for("the exec record and the new image's allocations", |l| {
        l.count(pid, RecordEvent::Exec) == 1
            && l.count(pid, RecordEvent::Alloc) as u64 == before.allocs + after.allocs
    });
    assert_eq!(
        lines.events(pid, RecordEvent::Exec)[0].size,
        3 << 20,
        "exec released what the old image held"
    );
    let s = agent.status();
    assert_process_holds(&s, pid, after.held);
    assert_cgroup_holds(&s, &cg, after.held);
    w.run_to_end();
}

/// Frees the driver refuses change nothing: two `cuMemFree_v2` of
/// addresses the process does not hold (recorded at the entry, where this
/// API's frees are final: untracked, no result), a `cuMemFreeAsync` of a
/// live allocation on a stream that is not one and a `cuMemHostUnregister`
/// of `cuMemHostAlloc`'s memory (recorded at their return: refused, so not
/// at all, and the memory stays charged until it is freed the right way).
#[test]
fn refused_frees_of_live_and_unknown_addresses_change_nothing() {
    if !privileged() {
        return;
    }
    refused_frees_change_nothing(&Agent::start(&[]));
}

/// The scenario above, under `agent` (live_table.rs runs it with every
/// allocation kept in the hash map).
pub(crate) fn refused_frees_change_nothing(agent: &Agent) {
    let cg = Cgroup::create("refused-frees");
    let card = SimCard::new(64 << 20);
    let mut w = Workload::spawn(&["--scenario", "failed-frees", "--pause"], Some(&cg), &card.env());
    let pid = w.pid();
    let refused = w.checkpoint();
    assert_eq!((refused.held, refused.allocs, refused.frees), (5 << 20, 4, 1));
    let untracked = 2;
    let lines = agent.wait_for("the frees so far", |l| {
        l.count(pid, RecordEvent::Alloc) as u64 == refused.allocs
            && l.count(pid, RecordEvent::Free) as u64 == refused.frees + untracked
    });
    let frees: Vec<_> = lines
        .events(pid, RecordEvent::Free)
        .iter()
        .map(|l| (l.caller.api.to_string(), l.size, l.result, l.flags.clone()))
        .collect();
    let at_entry = |size, flags| ("cuMemFree_v2".to_string(), size, None, flags);
    assert_eq!(
        frees,
        [at_entry(2 << 20, vec![]), at_entry(0, vec![Flag::Untracked]), at_entry(0, vec![Flag::Untracked])],
        "the free taken, then the two refused, in order"
    );
    let s = agent.status();
    assert_process_holds(&s, pid, refused.held);
    assert_cgroup_holds(&s, &cg, refused.held);
    assert_eq!(card.held(pid, 0).0, 4 << 20, "the card's own count (device memory)");
    w.resume();
    let freed = w.checkpoint();
    let lines = agent.wait_for("the stream-ordered free", |l| {
        l.count(pid, RecordEvent::Free) as u64 == freed.frees + untracked
    });
    let at_return: Vec<_> = lines.events(pid, RecordEvent::Free)[3..]
        .iter()
        .map(|l| (l.caller.api.as_ref(), l.size, l.result, l.kind.as_ref()))
        .collect();
    assert_eq!(
        at_return,
        [("cuMemFreeAsync", 3 << 20, Some(0), "device"), ("cuMemFreeHost", 1 << 20, Some(0), "host")]
    );
    let s = agent.status();
    assert_process_holds(&s, pid, freed.held);
    assert_cgroup_holds(&s, &cg, freed.held);
    assert_eq!((freed.held, card.held(pid, 0).0), (1 << 20, 1 << 20));
    w.resume();
    w.finish();
    agent.wait_for_exit(pid);
    assert_cgroup_holds(&agent.status(), &cg, 0);
}
