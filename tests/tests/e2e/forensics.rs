//! Out-of-memory forensics: a call the driver refuses for want of memory,
//! and a call that crosses a limit, carry `holders`, who held the memory
//! at that moment, named with their exact bytes: the simulated card filled
//! from two cgroups, with NVML's capacity and use of the device.
use gpumem::output::{Holder, Holders, RecordEvent, SplitLine};
use gpumem_tests::harness::*;

const MIB: u64 = 1 << 20;

/// What a holder's row must say: who, and exactly how much device memory
/// on device 0.
fn assert_holder(h: &Holder, pid: Option<u32>, cgroup: &Cgroup, bytes: u64) {
    assert_eq!(h.pid, pid, "{h:?}");
    assert_eq!(h.cgroup.as_deref(), Some(cgroup.path.as_str()), "{h:?}");
    assert_eq!(h.bytes, bytes, "{h:?}");
    assert_eq!(h.split, [SplitLine { kind: "device".into(), device: Some(0), bytes }], "{h:?}");
}

/// A workload holding `n` allocations of `size` bytes on `card` until
/// resumed.
fn holding(cg: &Cgroup, size: u64, n: u32, card: &SimCard) -> Workload {
    let (size, n) = (size.to_string(), n.to_string());
    Workload::spawn(
        &["--scenario", "hold", "--size", &size, "--iterations", &n, "--pause"],
        Some(cg),
        &card.env(),
    )
}

#[test]
fn an_out_of_memory_refusal_names_who_held_the_device() {
    if !privileged() {
        return;
    }
    // A 64 MiB card: the holder's 12 MiB and two contexts' 2 MiB each
    // leave the filler 48 MiB.
    let card = SimCard::new(64 * MIB);
    let agent = Agent::start_on(&card, &[]);
    let holder_cg = Cgroup::create_nested("forensics-oom", &["holder"]);
    let filler_cg = Cgroup::create_nested("forensics-oom", &["filler"]);
    let mut holder = holding(&holder_cg, 3 * MIB, 4, &card);
    let held = holder.checkpoint();
    assert_eq!((held.checkpoint.as_str(), held.held), ("held", 12 * MIB));
    agent.wait_for_checkpoint(&held);
    let mut filler = Workload::spawn(
        &["--scenario", "oom", "--size", &MIB.to_string(), "--pause"],
        Some(&filler_cg),
        &card.env(),
    );
    let full = filler.checkpoint();
    assert_eq!(
        (full.checkpoint.as_str(), full.held, full.failed),
        ("full", 64 * MIB - 12 * MIB - 2 * CONTEXT_COST, 1)
    );
    assert_eq!(card.held(filler.pid(), 0), (full.held, CONTEXT_COST), "the card's own count");
    let lines = agent.wait_for_checkpoint(&full);
    let refused = lines.events(filler.pid(), RecordEvent::AllocFailed);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].result, Some(2));
    let h: &Holders = refused[0].holders.as_deref().expect("an out-of-memory refusal carries holders");
    assert_eq!(h.device, Some(0));
    assert_eq!(h.total, full.held + held.held, "everything held on device 0");
    assert_eq!(
        (h.capacity, h.used),
        (Some(64 * MIB), Some(64 * MIB)),
        "NVML: the card full, contexts and all"
    );
    assert_eq!(h.processes.len(), 2, "{h:?}");
    assert_holder(&h.processes[0], Some(filler.pid()), &filler_cg, full.held);
    assert_holder(&h.processes[1], Some(holder.pid()), &holder_cg, held.held);
    assert_eq!(h.processes[0].comm.as_deref(), Some("gpumem-workload"));
    assert_eq!(h.cgroups.len(), 2, "{h:?}");
    assert_holder(&h.cgroups[0], None, &filler_cg, full.held);
    assert_holder(&h.cgroups[1], None, &holder_cg, held.held);
    filler.run_to_end();
    holder.run_to_end();
}

#[test]
fn a_limit_decision_names_who_held_what_the_limit_counts() {
    if !privileged() {
        return;
    }
    let team = Cgroup::create_nested("forensics-limit", &["a"]);
    let other = Cgroup::create_nested("forensics-limit", &["b"]);
    let outside = Cgroup::create("forensics-outside");
    let parent = team.path.rsplit_once('/').unwrap().0.to_string();
    let card = SimCard::new(1 << 30);
    let agent = Agent::start_on(&card, &["--limit", &format!("cgroup:{parent}=10MiB,action=audit")]);
    let mut early = holding(&team, 3 * MIB, 2, &card);
    let mut outsider = holding(&outside, 5 * MIB, 1, &card);
    for w in [&mut early, &mut outsider] {
        let c = w.checkpoint();
        agent.wait_for_checkpoint(&c);
    }
    // 6 MiB held in a; b's steps of 2 MiB: the third would make 12.
    let late = Workload::spawn(
        &["--scenario", "steps", "--size", &(2 * MIB).to_string(), "--iterations", "3"],
        Some(&other),
        &card.env(),
    );
    let late_pid = late.pid();
    let (_, status) = late.until_exit();
    assert!(status.success(), "{status:?}");
    let lines = agent.wait_for_exit(late_pid);
    let decisions = lines.decisions(late_pid, Decision::Limit);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    let d = decisions[0];
    assert_eq!((d.usage, d.request), (10 * MIB, 2 * MIB));
    let h = d.holders.as_deref().expect("a limit decision carries holders");
    assert_eq!(h.total, d.usage, "the holders add up to what the limit counted");
    assert_eq!(h.processes.len(), 2, "only what the limit covers: {h:?}");
    assert_holder(&h.processes[0], Some(early.pid()), &team, 6 * MIB);
    assert_holder(&h.processes[1], Some(late_pid), &other, 4 * MIB);
    assert_holder(&h.cgroups[0], None, &team, 6 * MIB);
    assert_holder(&h.cgroups[1], None, &other, 4 * MIB);
    early.run_to_end();
    outsider.run_to_end();
}
