//! Several processes, each with several threads, allocating and freeing at
//! random through plain, async, per-thread async, managed and VMM calls,
//! freeing each other's allocations: every checkpoint matches exactly, per
//! process (with its kind:device split) and per cgroup, no call is seen in
//! part, and everything is zero after exit. Run on the
//! kernel matrix too: on 6.13 and later a uprobe program preempted on one
//! CPU meets the next run of itself there (see gpumem-ebpf's
//! base/task_stack.rs).
use gpumem::output::RecordEvent;
use gpumem_tests::harness::*;

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
}
