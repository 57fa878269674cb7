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

/// The directory NVIDIA's GPU Operator installs the driver's libraries
/// into (its driver container), the way this test makes one: removed when
/// dropped, with what it made.
struct DriverDir {
    made: Vec<std::path::PathBuf>,
    dir: std::path::PathBuf,
}

impl DriverDir {
    fn make() -> Self {
        let dir = std::path::PathBuf::from("/run/nvidia/driver/usr/lib/x86_64-linux-gnu");
        let made = dir.ancestors().take_while(|d| !d.exists()).map(|d| d.to_path_buf()).collect();
        std::fs::create_dir_all(&dir).unwrap();
        Self { made, dir }
    }
}

impl Drop for DriverDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join("libcuda.so.1"));
        for d in &self.made {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[test]
fn an_agent_started_before_the_driver_attaches_when_it_appears_and_traces_from_the_first_call() {
    if !privileged() {
        return;
    }
    let found = gpumem::bpf::discover::libraries(&[], &[], false).expect("looking for a driver");
    if let Some(lib) = found.libs.iter().find(|l| l.path.to_string_lossy().contains("libcuda")) {
        return skip(&format!(
            "this host has a driver's library ({}): no start without one",
            lib.path.display()
        ));
    }
    let driver = DriverDir::make();
    let agent = Agent::start_without_driver(&[]);
    assert!(agent.stderr().contains("no libcuda.so* found yet"), "{}", agent.stderr());
    let s = agent.status();
    assert!(!s.libcuda_attached && s.libraries.iter().all(|l| !l.contains("libcuda")), "{s:?}");
    // The driver's container starts: its library appears.
    let lib = driver.dir.join("libcuda.so.1");
    std::fs::copy(paths().libcuda, &lib).unwrap();
    agent.wait_for_status("the agent to attach to the driver", |s| s.libcuda_attached);
    let mut w =
        Workload::spawn(&["--libcuda", lib.to_str().unwrap(), "--scenario", "basic", "--pause"], None, &[]);
    let pid = w.pid();
    let c = w.checkpoint();
    let lines = agent.wait_for_checkpoint(&c);
    assert!(!lines.events(pid, Rec::Alloc).is_empty(), "its first calls were traced");
    assert_process_holds(&agent.status(), pid, c.held);
    w.run_to_end();
}

#[test]
fn require_libcuda_keeps_the_exit_without_a_driver() {
    if !privileged() {
        return;
    }
    let (status, stderr) =
        Agent::start_failing(&["--libcuda", "/nonexistent/libcuda.so.1", "--require-libcuda"]);
    assert!(!status.success() && stderr.contains("--libcuda /nonexistent/libcuda.so.1"), "{stderr}");
}
