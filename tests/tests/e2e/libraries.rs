//! A process that maps its own copy of libcuda (another inode, as a
//! container does) after the agent started is traced too.
use gpumem_tests::harness::*;

#[test]
fn a_new_libcuda_copy_is_attached_within_a_second_and_traced() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let scratch = scratch();
    let copy = scratch.path().join("libcuda.so.1");
    std::fs::copy(paths().libcuda, &copy).unwrap();
    let mut w = Workload::spawn(
        &["--libcuda", copy.to_str().unwrap(), "--scenario", "basic", "--pause", "--hold-at-start"],
        None,
        &[],
    );
    let pid = w.pid();
    assert_eq!(w.checkpoint().checkpoint, "loaded");
    // The agent finds the copy through /proc/PID/maps and attaches.
    let suffix = format!("{}/libcuda.so.1", scratch.path().display());
    wait_until("the agent to attach to the copy", || {
        agent.stderr().lines().any(|l| l.starts_with("gpumem: attached") && l.contains(&suffix))
    });
    w.resume();
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    let s = agent.status();
    assert_process_holds(&s, pid, c.held);
    assert_eq!(s.libraries.len(), 2, "{:?}", s.libraries);
    w.run_to_end();
    agent.wait_for_exit(pid);
    assert_process_holds(&agent.status(), pid, 0);
}
