//! The kernel's live table (gpumem-ebpf's account/live.rs): the slots of
//! a process that exits holding allocations are emptied by the agent,
//! exactly as many as it held, while a running process's stay and are
//! uncharged by its frees.
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

    stopped_with_every_free_found(agent, keeper_pid, 40);
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

    stopped_with_every_free_found(agent, pid, 40);
}

/// Stops `agent`: it exits cleanly, lost no record, and each of `pid`'s
/// `frees` frees found its allocation.
fn stopped_with_every_free_found(agent: Agent, pid: u32, frees: usize) {
    let (status, lines) = agent.stop();
    assert!(status.success(), "agent exit: {status}");
    assert_eq!(lines.lost(), 0, "records were lost");
    let found = lines.events(pid, RecordEvent::Free);
    assert_eq!(found.len(), frees);
    assert!(found.iter().all(|f| !f.flags.contains(&Flag::Untracked)), "every free found its allocation");
}
