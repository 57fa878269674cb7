//! Several processes, each with several threads, allocating and freeing at
//! random through plain, async, per-thread async, managed and VMM calls,
//! freeing each other's allocations: every checkpoint matches exactly, per
//! process (with its kind:device split) and per cgroup, no call is seen in
//! part, and everything is zero after exit. Run on the
//! kernel matrix too: on 6.13 and later a uprobe program preempted on one
//! CPU meets the next run of itself there (see gpumem-ebpf's
//! base/task_stack.rs).
//!
//! And the same processes SIGKILLed at random points of their calls, round
//! after round, under a cgroup limit: whatever a kill interrupts (a charge
//! racing the release, a free racing it, a thread killed inside a call, an
//! `alloc` reaching the agent after its process's `exit`), every process,
//! the cgroup and the limit's reservations return exactly to zero.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::RecordEvent;
use gpumem_tests::harness::*;
use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};

#[test]
fn random_mixed_families_across_threads_and_processes_add_up_exactly() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let (a, b) = (Cgroup::create("mix-a"), Cgroup::create("mix-b"));
    let spawn = |cg: &Cgroup, device: &str, seed: &str| {
        let args = ["--scenario", "threads", "--mix", "--threads", "4", "--iterations", "120"];
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--device", device, "--seed", seed, "--pause"]);
        Workload::spawn(&all, Some(cg), &[])
    };
    let mut ws = vec![(spawn(&a, "0", "11"), 0), (spawn(&a, "1", "12"), 0), (spawn(&b, "1", "13"), 1)];
    for round in ["mixed", "drained"] {
        let mut held = [0u64; 2];
        let mut truths = Vec::new();
        for (w, team) in ws.iter_mut() {
            let c = w.checkpoint();
            assert_eq!(c.checkpoint, round);
            held[*team] += c.held;
            truths.push(c);
        }
        for c in &truths {
            agent.wait_for_checkpoint(c);
        }
        let s = agent.status();
        for c in &truths {
            assert_process_holds(&s, c.pid, c.held);
            assert_eq!(split_of(&s, c.pid), c.split, "process {} split at {round}", c.pid);
        }
        assert_cgroup_holds(&s, &a, held[0]);
        assert_cgroup_holds(&s, &b, held[1]);
        assert_every_call_whole(&s);
        for (w, _) in ws.iter_mut() {
            w.resume();
        }
    }
    let pids: Vec<u32> = ws.iter().map(|(w, _)| w.pid()).collect();
    for (w, _) in ws {
        w.finish();
    }
    let lines =
        agent.wait_for("every exit record", |l| pids.iter().all(|&p| l.count(p, RecordEvent::Exit) == 1));
    let s = agent.status();
    for p in pids {
        assert_process_holds(&s, p, 0);
    }
    assert_cgroup_holds(&s, &a, 0);
    assert_cgroup_holds(&s, &b, 0);
    assert_every_call_whole(&s);
    assert_eq!(lines.lost(), 0, "records were lost");
    agent.wait_for_status("the exited processes' entries to be deleted", |s| s.released_entries == 0);
}

#[test]
fn processes_killed_mid_call_round_after_round_leave_every_total_at_zero() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("kill-loop");
    let target = format!("cgroup:{}", cg.path);
    // The workloads run flat out until killed: a ring that holds every
    // record they make meanwhile, for the totals to be checked record by
    // record too.
    let limit = format!("{target}=1TiB,action=audit");
    let card = SimCard::new(1 << 40);
    let agent = Agent::start_on(&card, &["--limit", &limit, "--ring-buffer", "64MiB"]);
    let mut pids = Vec::new();
    for round in 0..10 {
        let ws: Vec<Workload> = (0..3)
            .map(|i| {
                let seed = (100 + 3 * round + i).to_string();
                // Until killed: a bounded number held, never finishing.
                let args = ["--scenario", "threads", "--mix", "--threads", "4", "--iterations", "0"];
                Workload::spawn(&[&args[..], &["--seed", &seed]].concat(), Some(&cg), &card.env())
            })
            .collect();
        let these: Vec<u32> = ws.iter().map(Workload::pid).collect();
        // Killed while their threads are busy in the driver, as soon as
        // each holds memory on the card (asking the agent would wait for it
        // to catch up with them).
        wait_until("every process of the round holding memory", || {
            these.iter().all(|&p| card.held(p, 0).0 > 0)
        });
        for &p in &these {
            kill(Pid::from_raw(p as i32), Signal::SIGKILL).expect("killing a workload");
        }
        for w in ws {
            let (_, status) = w.until_exit();
            assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "round {round}: {status:?}");
        }
        pids.extend(these);
    }
    // A process killed before any of its calls returned was never charged:
    // it has no exit record.
    let lines = agent.wait_for("every exit record", |l| {
        pids.iter().all(|&p| l.count(p, RecordEvent::Exit) >= 1 || l.count(p, RecordEvent::Alloc) == 0)
    });
    // A thread killed on its way back from the driver may charge after its
    // leader's exit record: the released entry takes it back at once, and
    // the agent counts its record as late.
    let s = agent.wait_for_status("the cgroup to hold nothing", |s| {
        cgroup_entry(s, cg.id).is_none_or(|e| e.bytes == 0 && e.kernel_bytes == 0)
    });
    for &p in &pids {
        assert_process_holds(&s, p, 0);
    }
    assert_cgroup_holds(&s, &cg, 0);
    assert_every_call_whole(&s);
    assert_eq!(lines.lost(), 0, "records were lost");
    agent.wait_for_limit_usage("the limit's reservations to return to 0", &target, 0);
    // Every thread is gone: the entries kept for them are deleted.
    agent.wait_for_status("the released processes' entries to be deleted", |s| s.released_entries == 0);
    let allocs: usize = pids.iter().map(|&p| lines.count(p, RecordEvent::Alloc)).sum();
    println!(
        "{} processes killed mid-call after {allocs} allocations in all: {} records after their exit (late), {} runs skipped",
        pids.len(),
        s.late_records,
        s.skipped_runs
    );
}
