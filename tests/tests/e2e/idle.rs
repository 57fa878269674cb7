//! The agent's idle (gpumem-user's cmd/run/idle.rs): after a second
//! without a record it stops its drain timer and marks every CPU, and the
//! next record wakes it through its CPU's mark. The records then reach
//! the output without any request draining the ring, each exactly, and the
//! agent goes idle again once they stop.
use gpumem_tests::harness::*;

#[test]
fn an_idle_agent_is_woken_by_the_next_record() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let before = agent.wait_for_status("the agent idle", |s| s.idle);

    // Only the output is read until the records are there: a status
    // request would drain the ring itself, and a record the marks failed
    // to wake the agent for would still come, with the next second's
    // health step, uncounted.
    let mut w =
        Workload::spawn(&["--scenario", "hold", "--iterations", "3", "--size", "4096", "--pause"], None, &[]);
    let held = w.checkpoint();
    assert_eq!((held.checkpoint.as_str(), held.allocs), ("held", 3));
    agent.wait_for_checkpoint(&held);
    let s = agent.status();
    assert!(
        s.idle_wakes > before.idle_wakes,
        "the records reached the output without a wake-up from idle ({} before, {} now)",
        before.idle_wakes,
        s.idle_wakes
    );
    assert_process_holds(&s, w.pid(), held.held);

    // Idle again once the allocations' records stop (a status request that
    // reads nothing leaves the agent idle), and woken again by the frees.
    let s = agent.wait_for_status("the agent idle again", |s| s.idle);
    let pid = w.pid();
    w.resume();
    let freed = w.checkpoint();
    assert_eq!((freed.checkpoint.as_str(), freed.frees), ("freed", 3));
    agent.wait_for_checkpoint(&freed);
    let after = agent.status();
    assert!(after.idle_wakes > s.idle_wakes, "the frees reached the output without a wake-up from idle");
    assert_process_holds(&after, pid, 0);
    w.finish();
    agent.wait_for_exit(pid);
}
