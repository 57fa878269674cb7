//! The kernel's live table (gpumem-ebpf's account/live.rs): the slots of
//! a process that exits holding allocations are emptied by the agent,
//! exactly as many as it held, while a running process's stay and are
//! uncharged by its frees; likewise the entries an exited process leaves
//! in the hash maps (VMM handles, their mappings, allocations kept there
//! when their slots were taken) are forgotten by the kernel at the
//! agent's asking, and a running process's kept; and so are the totals of
//! cgroups removed holding nothing.
use gpumem::output::{Flag, RecordEvent};
use gpumem_tests::harness::*;

#[test]
fn an_exited_processs_slots_are_emptied_and_a_running_ones_kept() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let hold = |n: &str| {
        Workload::spawn(&["--scenario", "hold", "--iterations", n, "--size", "4096", "--pause"], None, &[])
    };
    let mut keeper = hold("40");
    let c = keeper.checkpoint();
    assert_eq!(c.checkpoint, "held");
    agent.wait_for_checkpoint(&c);

    // Killed holding 1,000 allocations, as a trainer is: the kernel
    // releases its charges at the exit; the agent empties its slots.
    let mut leaver = hold("1000");
    let c = leaver.checkpoint();
    assert_eq!(c.checkpoint, "held");
    agent.wait_for_checkpoint(&c);
    let pid = leaver.pid();
    leaver.kill();
    agent.wait_for_exit(pid);
    let s =
        agent.wait_for_status("the exited process's 1,000 slots emptied", |s| s.live_slots_reclaimed >= 1000);
    assert_eq!(s.live_slots_reclaimed, 1000, "exactly the exited process's allocations");
    assert_process_holds(&s, keeper.pid(), 40 * 4096);

    // The running process's entries were kept: its frees find them.
    keeper.resume();
    let c = keeper.checkpoint();
    assert_eq!(c.checkpoint, "freed");
    agent.wait_for_checkpoint(&c);
    assert_process_holds(&agent.status(), keeper.pid(), 0);
    let keeper_pid = keeper.pid();
    keeper.finish();

    stopped_with_every_free_found(agent, &[(keeper_pid, 40)]);
}

/// Processes killed holding allocations in the hash maps: 4,100 kept in
/// `LIVE` (with `GPUMEM_LIVE_SLOTS=4`, the table's 4 slots taken by a
/// running process) and 30 mapped VMM handles. The kernel forgets exactly
/// their 4,130 entries and 30 mappings, over two health steps (more than
/// the 4,096 a step, `health/reclaim.rs`); the running processes' 36 kept
/// allocations and 10 mapped handles stay, and each of their frees finds
/// its entry.
#[test]
fn an_exited_processs_hash_map_entries_are_forgotten_and_a_running_ones_kept() {
    if !privileged() {
        return;
    }
    let agent = Agent::start_with_env(&[("GPUMEM_LIVE_SLOTS", "4")], &[]);
    let hold = |n: &str, vmm: bool| {
        let mut args = vec!["--scenario", "hold", "--iterations", n, "--pause"];
        args.extend(if vmm { &["--vmm", "--size", "2097152"][..] } else { &["--size", "4096"] });
        let mut w = Workload::spawn(&args, None, &[]);
        let c = w.checkpoint();
        assert_eq!(c.checkpoint, "held");
        agent.wait_for_checkpoint(&c);
        w
    };
    let keeper = hold("40", false);
    let keeper_vmm = hold("10", true);
    let mut leaver = hold("4100", false);
    let mut leaver_vmm = hold("30", true);
    assert_eq!(agent.status().live_spilled, 36 + 4100, "the table's 4 slots are the keeper's");

    for w in [&mut leaver, &mut leaver_vmm] {
        let pid = w.pid();
        w.kill();
        agent.wait_for_exit(pid);
    }
    let s = agent.wait_for_status("the exited processes' 4,130 entries and 30 mappings forgotten", |s| {
        s.live_entries_forgotten >= 4130 && s.vmm_mappings_forgotten >= 30
    });
    assert_eq!(
        (s.live_entries_forgotten, s.vmm_mappings_forgotten, s.live_spilled),
        (4130, 30, 36),
        "exactly the exited processes' entries forgotten, the keeper's 36 kept allocations left"
    );
    assert_process_holds(&s, keeper.pid(), 40 * 4096);
    assert_process_holds(&s, keeper_vmm.pid(), 10 * (2 << 20));

    let mut freed = Vec::new();
    for (mut w, frees) in [(keeper, 40), (keeper_vmm, 10)] {
        w.resume();
        let c = w.checkpoint();
        assert_eq!(c.checkpoint, "freed");
        agent.wait_for_checkpoint(&c);
        assert_process_holds(&agent.status(), w.pid(), 0);
        freed.push((w.pid(), frees));
        w.finish();
    }
    assert_eq!(agent.status().live_spilled, 0, "every kept allocation freed");
    stopped_with_every_free_found(agent, &freed);
}

/// With the programs using only the table's first 4 slots
/// (`GPUMEM_LIVE_SLOTS=4`, a testing aid), a process's 40 allocations take
/// the 4 slots and the other 36 go to the hash map, counted there; each is
/// freed exactly, and the count is back to 0 once all are freed.
#[test]
fn allocations_whose_slots_are_taken_go_to_the_hash_map_and_are_freed_exactly() {
    if !privileged() {
        return;
    }
    let agent = Agent::start_with_env(&[("GPUMEM_LIVE_SLOTS", "4")], &[]);
    let mut w = Workload::spawn(
        &["--scenario", "hold", "--iterations", "40", "--size", "4096", "--pause"],
        None,
        &[],
    );
    let pid = w.pid();
    let c = w.checkpoint();
    assert_eq!(c.checkpoint, "held");
    agent.wait_for_checkpoint(&c);
    let s = agent.status();
    assert_process_holds(&s, pid, 40 * 4096);
    assert_eq!(s.live_spilled, 36, "4 in the table, the rest in the hash map");
    w.resume();
    let c = w.checkpoint();
    assert_eq!(c.checkpoint, "freed");
    agent.wait_for_checkpoint(&c);
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_eq!(s.live_spilled, 0, "every spilled allocation freed");
    w.finish();

    stopped_with_every_free_found(agent, &[(pid, 40)]);
}

/// A process that execs (the same pid, a new image) holding a mapped VMM
/// handle: the kernel forgets the old image's handle and mapping while
/// the process runs on with a new image of its own (a current generation
/// beside the dead one), and the new image's frees find their
/// allocations.
#[test]
fn an_exec_d_images_hash_map_entries_are_forgotten_and_the_new_images_kept() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let mut w = Workload::spawn(&["--scenario", "exec", "--vmm", "--pause"], None, &[]);
    let pid = w.pid();
    let before = w.checkpoint();
    assert_eq!((before.held, before.allocs), ((3 << 20) + (2 << 20), 2));
    agent.wait_for_checkpoint(&before);
    w.resume();
    // The new image's truth counts its own calls only.
    let c = w.checkpoint();
    assert_eq!((c.checkpoint.as_str(), c.pid, c.allocs), ("allocated", pid, 5));
    agent.wait_for("both images' allocations", |l| l.count(pid, RecordEvent::Alloc) == 2 + 5);
    let s = agent.wait_for_status("the old image's handle and mapping forgotten", |s| {
        s.live_entries_forgotten >= 1 && s.vmm_mappings_forgotten >= 1
    });
    assert_eq!(
        (s.live_entries_forgotten, s.vmm_mappings_forgotten),
        (1, 1),
        "the old image's, and only they"
    );
    assert_process_holds(&s, pid, c.held);
    w.resume();
    assert_eq!(w.checkpoint().frees, 2);
    agent.wait_for("the new image's frees", |l| l.count(pid, RecordEvent::Free) == 2);
    w.run_to_end();
    agent.wait_for_exit(pid);
    stopped_with_every_free_found(agent, &[(pid, 2)]);
}

/// A running process holding 4 allocations: with `GPUMEM_LIVE_SLOTS=4`,
/// every slot of the table, so that every other allocation goes to the
/// hash map.
fn fill_table(agent: &Agent) -> Workload {
    let mut keeper =
        Workload::spawn(&["--scenario", "hold", "--iterations", "4", "--size", "4096", "--pause"], None, &[]);
    agent.wait_for_checkpoint(&keeper.checkpoint());
    assert_eq!(agent.status().live_spilled, 0, "the keeper's 4 allocations fill the table");
    keeper
}

/// Frees the driver refuses, of allocations kept in the hash map (the
/// table's 4 slots taken by a running process): each refused free takes
/// its allocation out at the entry and puts it back at the return, kept in
/// the hash map again and counted, and the accounting stays exact (the
/// `trace_exact` scenario's own checks); the 1 MiB the process leaves at
/// its exit is forgotten.
#[test]
fn refused_frees_of_allocations_in_the_hash_map_put_them_back_exactly() {
    if !privileged() {
        return;
    }
    let agent = Agent::start_with_env(&[("GPUMEM_LIVE_SLOTS", "4")], &[]);
    let mut keeper = fill_table(&agent);
    crate::trace_exact::refused_frees_change_nothing(&agent);
    let s = agent.wait_for_status("the exited process's 1 MiB forgotten", |s| s.live_entries_forgotten >= 1);
    assert_eq!((s.live_entries_forgotten, s.live_spilled), (1, 0), "its last allocation, and nothing else");
    keeper.resume();
    let keeper_pid = keeper.pid();
    agent.wait_for_checkpoint(&keeper.checkpoint());
    keeper.finish();
    stopped_with_every_free_found(agent, &[(keeper_pid, 4)]);
}

/// Stops `agent`: it exits cleanly, lost no record, and each process's
/// frees (pid, how many) found its allocation.
fn stopped_with_every_free_found(agent: Agent, processes: &[(u32, usize)]) {
    let (status, lines) = agent.stop();
    assert!(status.success(), "agent exit: {status}");
    assert_eq!(lines.lost(), 0, "records were lost");
    for &(pid, frees) in processes {
        let found = lines.events(pid, RecordEvent::Free);
        assert_eq!(found.len(), frees, "process {pid}'s frees");
        assert!(
            found.iter().all(|f| !f.flags.contains(&Flag::Untracked)),
            "every free of process {pid} found its allocation"
        );
    }
}

/// Cgroups that charged and were removed holding nothing (a finished
/// pod's containers): at the sweep after the next exit the kernel forgets
/// exactly their totals. A cgroup still there keeps its own at 0, and one
/// removed while a process moved out of it still holds what it charged
/// there keeps its own until that is freed (the sweep after, it goes
/// too).
#[test]
fn removed_cgroups_totals_are_forgotten_once_they_hold_nothing_and_the_others_kept() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let before = agent.status().cgroup_entries;
    let run_in = |cg: &Cgroup| {
        let w =
            Workload::spawn(&["--scenario", "hold", "--iterations", "2", "--size", "4096"], Some(cg), &[]);
        let pid = w.pid();
        w.finish();
        agent.wait_for_exit(pid);
    };
    let kept = Cgroup::create("totals-kept");
    let removed: Vec<Cgroup> = (0..3).map(|i| Cgroup::create(&format!("totals-removed-{i}"))).collect();
    for cg in removed.iter().chain([&kept]) {
        run_in(cg);
    }
    // Moved out of its cgroup holding 3 allocations, which stay charged
    // to it.
    let moved = Cgroup::create("totals-moved");
    let mut holder = Workload::spawn(
        &["--scenario", "hold", "--iterations", "3", "--size", "4096", "--pause"],
        Some(&moved),
        &[],
    );
    let c = holder.checkpoint();
    assert_eq!(c.checkpoint, "held");
    agent.wait_for_checkpoint(&c);
    std::fs::write(kept.dir.join("cgroup.procs"), holder.pid().to_string()).expect("moving the holder");
    let moved_id = moved.id;
    assert_eq!(agent.status().cgroup_entries, before + 5);
    drop(removed);
    drop(moved);

    // A sweep follows an exit.
    run_in(&kept);
    let s = agent.wait_for_status("the 3 removed empty cgroups' totals forgotten", |s| {
        s.cgroup_entries_forgotten >= 3
    });
    assert_eq!((s.cgroup_entries_forgotten, s.cgroup_entries), (3, before + 2), "kept's and moved's stay");
    let held = s.cgroups.iter().find(|e| e.cgroup_id == moved_id).map(|e| e.kernel_bytes);
    assert_eq!(held, Some(3 * 4096), "the removed cgroup still holds the moved process's charges");

    // Freed: its total is 0, and the sweep after the holder's exit forgets it.
    let pid = holder.pid();
    holder.resume();
    let c = holder.checkpoint();
    assert_eq!(c.checkpoint, "freed");
    holder.finish();
    agent.wait_for_exit(pid);
    let s = agent.wait_for_status("the moved process's removed cgroup forgotten once empty", |s| {
        s.cgroup_entries_forgotten >= 4
    });
    assert_eq!((s.cgroup_entries_forgotten, s.cgroup_entries), (4, before + 1), "only kept's stays");
    stopped_with_every_free_found(agent, &[(pid, 3)]);
}
