//! Faults around the agent: the disk its records go to fills up; the agent
//! is stopped while processes allocate; the kernel's map of calls in
//! flight is full.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::{Line, RecordEvent};
use gpumem_tests::harness::*;
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;

/// The calls of process `pid` the records hold (allocations, frees and
/// failed allocations).
fn calls_recorded(lines: &[Line], pid: u32) -> u64 {
    [RecordEvent::Alloc, RecordEvent::Free, RecordEvent::AllocFailed]
        .iter()
        .map(|&e| lines.count(pid, e) as u64)
        .sum()
}

#[test]
fn a_full_disk_loses_records_counted_while_accounting_and_limits_go_on() {
    if !privileged() {
        return;
    }
    let disk = Tmpfs::mount(2 * MIB);
    let cg = Cgroup::create("full-disk");
    let agent = Agent::start_writing_to(
        Some(disk.path().join("events.jsonl")),
        &["--limit", &format!("cgroup:{}=10MiB", cg.path)],
    );
    let filler = disk.fill();

    // 4 threads x 1,500 calls: several MiB of records, more than the 1 MiB
    // the agent keeps for a writer that fails.
    let args = ["--scenario", "threads", "--threads", "4", "--iterations", "1500", "--pause"];
    let mut w = Workload::spawn(&args, None, &[]);
    let c = w.checkpoint();
    let s = agent.wait_for_state(
        "the ledger to hold the checkpoint while the disk is full",
        || agent.status(),
        |s| proc_entry(s, c.pid).is_some_and(|e| e.bytes == c.held),
    );
    assert_process_holds(&s, c.pid, c.held);
    assert!(s.unwritten > 0, "records were dropped for the full disk: {s:?}");
    assert!(agent.stderr().contains("cannot write records to"), "{}", agent.stderr());

    // Room again: the agent says so, writes what it kept (no line torn:
    // every line of the file reads as a record), and what it lost is
    // exactly what the file lacks.
    std::fs::remove_file(&filler).unwrap();
    wait_until("the agent to write again", || agent.stderr().contains("again;"));
    let truth = c.allocs + c.frees + c.failed;
    let seen = |l: &[Line]| calls_recorded(l, c.pid);
    let lines = agent.wait_for("the records kept for the disk, and a dropped line counting the rest", |l| {
        l.dropped().last().is_some_and(|d| seen(l) + d.unwritten == truth)
    });
    let unwritten = lines.dropped().last().unwrap().unwritten;
    assert_eq!(agent.status().unwritten, unwritten);
    assert!(seen(&lines) < truth && unwritten > 0, "some records were lost: {} of {truth}", seen(&lines));

    // Full again: a process crossing its cgroup's limit is still stopped
    // at the crossing (the kernel decides), and the ledger stays exact.
    let filler = disk.fill();
    let size = (3 * MIB).to_string();
    let over =
        Workload::spawn(&["--scenario", "steps", "--size", &size, "--iterations", "5"], Some(&cg), &[]);
    let (steps, status) = over.until_exit();
    assert_eq!(steps.len(), 3, "3 + 3 + 3 MiB fit in 10 MiB, the fourth does not: {steps:?}");
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
    agent.wait_for_state(
        "the limited cgroup to hold nothing after its process was killed",
        || agent.status(),
        |s| cgroup_entry(s, cg.id).map_or(0, |e| e.kernel_bytes) == 0,
    );
    assert_process_holds(&agent.status(), c.pid, c.held);
    std::fs::remove_file(&filler).unwrap();
    w.run_to_end();
}

#[test]
fn a_stopped_agent_loses_records_counted_while_the_kernel_stays_exact() {
    if !privileged() {
        return;
    }
    // A 128 KiB ring: about 1,300 records wait for a stopped agent.
    let agent = Agent::start(&["--ring-buffer", "128KiB"]);
    agent.signal(Signal::SIGSTOP);
    let args = ["--scenario", "threads", "--threads", "4", "--iterations", "1500", "--pause"];
    let mut w = Workload::spawn(&args, None, &[]);
    let c = w.checkpoint();
    agent.signal(Signal::SIGCONT);
    // The kernel counted every byte while the agent was stopped.
    let s = agent.wait_for_state(
        "the kernel's count of the workload",
        || agent.status(),
        |s| proc_entry(s, c.pid).is_some_and(|e| e.kernel_bytes == c.held),
    );
    assert_eq!(proc_entry(&s, c.pid).unwrap().kernel_bytes, c.held);
    // Records the full ring refused are counted: with those the file
    // holds, exactly the workload's calls.
    let truth = c.allocs + c.frees + c.failed;
    let seen = |l: &[Line]| calls_recorded(l, c.pid);
    let lines = agent.wait_for("the records kept in the ring, and a dropped line counting the rest", |l| {
        l.lost() > 0 && seen(l) + l.lost() == truth
    });
    assert_eq!(agent.status().dropped, lines.lost());
    w.run_to_end();
    agent.wait_for_state(
        "the kernel to release the workload at its exit",
        || agent.status(),
        |s| proc_entry(s, c.pid).map_or(0, |e| e.kernel_bytes) == 0,
    );
}

#[test]
fn a_full_calls_in_flight_map_leaves_every_limit_reservation_settled() {
    if !privileged() {
        return;
    }
    // A call a limit reserved bytes for is kept in `PENDING` (a thread
    // killed inside it must give them back). One entry: the first thread's
    // call takes it, kept until that thread exits (the workload's threads
    // end together), and the other threads' find it full. Their calls are
    // then kept in their own task storage, so their returns commit what
    // was reserved at the driver's size; a reservation nothing kept would
    // stay counted under the limit forever.
    let cg = Cgroup::create("pending-full");
    let target = format!("cgroup:{}", cg.path);
    let limit = format!("{target}=1TiB,action=audit");
    let agent = Agent::start_with_env(&[("GPUMEM_PENDING_ENTRIES", "1")], &["--limit", &limit]);
    let args = ["--scenario", "threads", "--threads", "4", "--iterations", "200", "--pause"];
    let mut w = Workload::spawn(&args, Some(&cg), &[]);
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    assert_process_holds(&agent.status(), c.pid, c.held);
    agent.wait_for_limit_usage("the limit's usage to be what the workload holds", &target, c.held);
    let lines = agent
        .wait_for("a dropped record counting the full map", |l| l.dropped().iter().any(|d| d.map_full > 0));
    let unmatched: u64 = lines.dropped().iter().map(|d| d.unmatched_returns).sum();
    assert_eq!(unmatched, 0, "returns that found no call: {:?}", lines.dropped());
    w.run_to_end();
    agent.wait_for_limit_usage("the limit's usage to return to 0 after the workload's exit", &target, 0);
}
