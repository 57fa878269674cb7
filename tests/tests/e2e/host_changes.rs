//! The host changes under the agent: a cgroup removed while memory is
//! charged to it; the driver library replaced on disk (a driver upgrade)
//! while processes still map the old one.
use gpumem::output::{Flag, RecordEvent};
use gpumem_tests::{harness::*, truth::Checkpoint};

const MIB: u64 = 1 << 20;

/// What cgroup `cg` holds in the agent's ledger and in the kernel's map.
fn cgroup_holds(agent: &Agent, id: u64) -> (u64, u64) {
    cgroup_entry(&agent.status(), id).map_or((0, 0), |e| (e.bytes, e.kernel_bytes))
}

#[test]
fn a_cgroup_removed_while_charged_keeps_its_bytes_until_freed_and_its_processes_charge_the_new_one() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let old = Cgroup::create("removed");
    let new = Cgroup::create("moved-to");
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&old), &[]);
    let size = MIB.to_string();
    let mut steps = Workload::spawn(
        &["--scenario", "steps", "--size", &size, "--iterations", "2", "--pause"],
        Some(&old),
        &[],
    );
    let c = w.checkpoint();
    let s1 = steps.checkpoint();
    agent.wait_for_checkpoint(&c);
    agent.wait_for_checkpoint(&s1);

    // Both processes move out and the cgroup is removed while its
    // allocations are still held.
    for pid in [c.pid, s1.pid] {
        std::fs::write(new.dir.join("cgroup.procs"), pid.to_string()).expect("moving a workload");
    }
    std::fs::remove_dir(&old.dir).expect("removing the emptied cgroup");
    assert_eq!(cgroup_holds(&agent, old.id), (c.held + s1.held, c.held + s1.held));

    // A free of memory charged to the removed cgroup uncharges it; what is
    // allocated now is charged to the new one.
    w.resume();
    let c = w.checkpoint();
    steps.resume();
    let s2 = steps.checkpoint();
    agent.wait_for_checkpoint(&c);
    agent.wait_for_checkpoint(&s2);
    assert_eq!(cgroup_holds(&agent, old.id), (c.held + s1.held, c.held + s1.held));
    assert_eq!(cgroup_holds(&agent, new.id), (s2.held - s1.held, s2.held - s1.held));
    let s = agent.status();
    assert_process_holds(&s, c.pid, c.held);
    assert_process_holds(&s, s2.pid, s2.held);
    assert_eq!(cgroup_entry(&s, old.id).and_then(|e| e.cgroup.as_deref()), Some(old.path.as_str()));

    // Their exits release both cgroups, the removed one included, once.
    w.run_to_end();
    steps.run_to_end();
    agent.wait_for_exit(c.pid);
    agent.wait_for_exit(s2.pid);
    agent.wait_for_state(
        "both cgroups to hold nothing",
        || (cgroup_holds(&agent, old.id), cgroup_holds(&agent, new.id)),
        |&(o, n)| o == (0, 0) && n == (0, 0),
    );
}

/// Starts the basic scenario on `libcuda`, lets it allocate once the agent
/// has attached to the file it loaded (`libraries` files attached in all),
/// and returns it paused at its first checkpoint, recorded by the agent.
fn basic_once_attached(agent: &Agent, libcuda: &str, libraries: usize) -> (Workload, Checkpoint) {
    let mut w = Workload::spawn(
        &["--libcuda", libcuda, "--scenario", "basic", "--pause", "--hold-at-start"],
        None,
        &[],
    );
    assert_eq!(w.checkpoint().checkpoint, "loaded");
    wait_until("the agent to attach to the file the workload loaded", || {
        agent.status().libraries.len() == libraries
    });
    w.resume();
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    (w, c)
}

#[test]
fn a_driver_library_replaced_on_disk_is_attached_anew_and_the_old_stays_traced_while_mapped() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let scratch = scratch();
    let lib = scratch.path().join("libcuda.so.1");
    std::fs::copy(paths().libcuda, &lib).unwrap();
    let libcuda = lib.to_str().unwrap();
    let (mut before, _) = basic_once_attached(&agent, libcuda, 2);

    // The upgrade: a new file renamed over the old path (a new inode, as
    // package managers install), while `before` still maps the old one.
    let staged = scratch.path().join("libcuda.so.1.new");
    std::fs::copy(paths().libcuda, &staged).unwrap();
    std::fs::rename(&staged, &lib).unwrap();
    let (after, a) = basic_once_attached(&agent, libcuda, 3);

    // Both are traced exactly: the old file's process frees what it
    // allocated before the upgrade (no free untracked), the new file's
    // allocates through the new inode.
    before.resume();
    let b = before.checkpoint();
    agent.wait_for_checkpoint(&b);
    let s = agent.status();
    assert_process_holds(&s, b.pid, b.held);
    assert_process_holds(&s, a.pid, a.held);
    before.run_to_end();
    after.run_to_end();
    agent.wait_for_exit(b.pid);
    let lines = agent.wait_for_exit(a.pid);
    for pid in [b.pid, a.pid] {
        let frees = lines.events(pid, RecordEvent::Free);
        assert_eq!(frees.len(), 2, "{frees:?}");
        assert!(frees.iter().all(|f| !f.flags.contains(&Flag::Untracked)), "{frees:?}");
    }
    let s = agent.status();
    assert_process_holds(&s, b.pid, 0);
    assert_process_holds(&s, a.pid, 0);
}
