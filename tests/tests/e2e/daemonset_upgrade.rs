//! An upgrade and a restart as a DaemonSet's rolling update does them:
//! the agent's container gets SIGTERM and goes, and a new container starts
//! in its place: first of a newer image (another build, which takes the
//! pinned state over), then of the same image again (which adopts it).
//! With the manifest's `--persist` and the node's BPF file system, a
//! workload allocating throughout has every call recorded once across the
//! three agents' logs and is counted exactly, and the ConfigMap's limit is
//! enforced while no agent runs and after each change of agent.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::{Flag, Line, RecordEvent};
use gpumem_tests::{harness::*, truth::Checkpoint};

use super::daemonset::{Detach, Node};

/// Waits until the records of `agents` (the earlier ones' logs are
/// final) hold checkpoint `c`'s calls of its process once each.
fn calls_once(agents: &[&AgentContainer], c: &Checkpoint) -> Vec<Line> {
    let calls = [RecordEvent::Alloc, RecordEvent::Free, RecordEvent::AllocFailed];
    let want = vec![c.allocs, c.frees, c.failed];
    let read = || {
        let lines: Vec<Line> = agents.iter().flat_map(|a| a.lines()).collect();
        let counts: Vec<u64> = calls.iter().map(|&e| lines.count(c.pid, e) as u64).collect();
        (counts, lines)
    };
    let last = agents.last().unwrap();
    let what = "every call of the checkpoint recorded once";
    let (_, lines) = poll(what, read, |(n, _)| *n == want, || last.logs());
    lines
}

/// The agent's messages in `c`'s log (not its records), printed for the
/// test's transcript.
fn said(c: &AgentContainer) -> String {
    let said: Vec<String> = c.logs().lines().filter(|l| !l.starts_with('{')).map(String::from).collect();
    println!("$ podman logs {} | grep -v '^{{'\n{}", c.name, said.join("\n"));
    said.join("\n")
}

#[test]
fn an_upgrade_and_a_restart_replace_the_agents_container_without_a_gap() {
    if !privileged() {
        return;
    }
    let Some(podman) = Podman::available() else { return };
    let Some(image) = podman.agent_image() else { return };
    let Some(newer) = podman.next_agent_image() else { return };
    let ds = DaemonSet::read();
    assert!(ds.args.iter().any(|a| a == "--persist"), "the manifest's agent persists: {:?}", ds.args);
    let Some(_detach) = Detach::guard() else { return };
    let cg = Cgroup::create("daemonset-upgrade");
    let node = Node::make(&ds, &cg.path);
    let lib = node.driver.join("libcuda.so.1");
    let lib = lib.to_str().unwrap();
    let name = format!("gpumem-upgrade-{}", std::process::id());
    let first = podman.run_agent(&format!("{name}-a"), (&ds, "none"), &image, |m| node.host(m));
    first.wait_for_status("the node's driver attached", |s| s.libcuda_attached);
    said(&first);

    // Four threads allocating and freeing through every family, 2,000
    // calls a second, in a cgroup of their own.
    let busy = Cgroup::create("daemonset-upgrade-load");
    let args = ["--libcuda", lib, "--scenario", "threads", "--mix", "--threads", "4", "--iterations", "0"];
    let mut w = Workload::spawn(&[&args[..], &["--pause", "--rate", "2000"]].concat(), Some(&busy), &[]);
    let pid = w.pid();
    first.wait_for_status("the workload holding memory", |s| proc_entry(s, pid).is_some_and(|p| p.bytes > 0));
    assert_eq!(first.stop(ds.grace_seconds), 0, "the agent's SIGTERM:\n{}", first.logs());

    // No agent runs: the kernel enforces the ConfigMap's limit.
    let limited = || {
        let steps =
            ["--libcuda", lib, "--scenario", "steps", "--size", "16777216", "--iterations", "2", "--pause"];
        let (seen, status) = Workload::spawn(&steps, Some(&cg), &[]).resumed_to_exit();
        assert_eq!((seen, status.signal()), (vec!["step-1".to_string()], Some(9)), "16 MiB fit, 32 cross 24");
    };
    limited();

    // The newer image's container takes the pinned state over: its
    // programs attach beside the old ones, run in their place, and the old
    // build's are removed.
    let second = podman.run_agent(&format!("{name}-b"), (&ds, "none"), &newer, |m| node.host(m));
    let logs = said(&second);
    assert!(logs.contains("adopted the gpumem state of build"), "{logs}");
    assert!(logs.contains("took over from build"), "{logs}");
    limited();
    w.resume();
    let c = w.checkpoint();
    assert_eq!(c.checkpoint, "mixed");
    let lines = calls_once(&[&first, &second], &c);
    assert_process_holds(&second.status(), pid, c.held);
    let untracked =
        lines.events(pid, RecordEvent::Free).iter().filter(|f| f.flags.contains(&Flag::Untracked)).count();
    assert_eq!((untracked, lines.lost()), (0, 0), "untracked frees, records lost");

    // A restart of the same image, the workload running: it adopts.
    assert_eq!(second.stop(ds.grace_seconds), 0);
    let third = podman.run_agent(&format!("{name}-c"), (&ds, "none"), &newer, |m| node.host(m));
    let logs = said(&third);
    assert!(logs.contains("adopted the gpumem state") && !logs.contains("took over"), "{logs}");
    limited();
    w.resume();
    let c = w.checkpoint();
    assert_eq!(c.checkpoint, "drained");
    calls_once(&[&first, &second, &third], &c);
    assert_process_holds(&third.status(), pid, c.held);
    w.finish();
    third.wait_for_status("the workload's exit released", |s| proc_entry(s, pid).is_none());
    assert_eq!(third.stop(ds.grace_seconds), 0);
}
