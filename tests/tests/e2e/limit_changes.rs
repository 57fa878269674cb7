//! Limits changed while the agent runs, without losing what is counted:
//! `gpumem limit set|clear|list` over the control socket, and SIGHUP
//! rereading --config.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::DecisionEvent;
use gpumem_tests::harness::*;
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;

/// `steps` with --pause: one checkpoint per `size` allocated.
fn paused_steps(cg: &Cgroup, size: u64, n: u32) -> Workload {
    let (size, n) = (size.to_string(), n.to_string());
    Workload::spawn(&["--scenario", "steps", "--size", &size, "--iterations", &n, "--pause"], Some(cg), &[])
}

#[test]
fn a_limit_lowered_at_run_time_keeps_its_usage_and_stops_the_next_crossing() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-change");
    let target = format!("cgroup:{}", cg.path);
    let agent = Agent::start(&["--limit", &format!("{target}=100MiB,action=audit")]);
    let mut w = paused_steps(&cg, 4 * MIB, 6);
    let pid = w.pid();
    for _ in 0..2 {
        let c = w.checkpoint();
        agent.wait_for_checkpoint(&c);
        w.resume();
    }
    let c = w.checkpoint(); // step-3: 12 MiB held
    agent.wait_for_checkpoint(&c);
    let limits = agent.limits();
    let r = rule(&limits, &target).unwrap_or_else(|| panic!("{limits:?}"));
    assert_eq!((r.usage, r.hard, r.action.as_str()), (12 * MIB, 100 * MIB, "audit"));

    // Lowered under what is held: usage stays, the next call crosses.
    let (ok, _, err) = agent.limit(&["set", &format!("{target}=14MiB,action=signal:SIGKILL")]);
    assert!(ok, "{err}");
    let limits = agent.limits();
    let r = rule(&limits, &target).unwrap();
    assert_eq!((r.usage, r.hard, r.action.as_str()), (12 * MIB, 14 * MIB, "signal:9"));
    let (seen, status) = w.until_exit();
    assert!(seen.is_empty(), "the 4th 4 MiB call crosses 14 MiB: {seen:?}");
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
    let lines = agent.wait_for_exit(pid);
    let l = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!((l[0].usage, l[0].limit_bytes, l[0].action.as_str()), (12 * MIB, 14 * MIB, "signal:9"));
    wait_until("the limit to count nothing after the exit", || {
        rule(&agent.limits(), &target).unwrap().usage == 0
    });

    // Cleared: the same pattern runs to the end.
    let (ok, _, err) = agent.limit(&["clear", &target]);
    assert!(ok, "{err}");
    assert!(rule(&agent.limits(), &target).is_none());
    let (seen, status) = paused_steps(&cg, 4 * MIB, 6).until_exit();
    assert!(status.success(), "{status:?}");
    assert_eq!(seen.last().unwrap().checkpoint, "done");
    let (ok, _, err) = agent.limit(&["clear", &target]);
    assert!(!ok && err.contains("no limit on"), "{err}");
}

#[test]
fn a_limit_set_on_a_process_already_holding_memory_counts_that_memory() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-new");
    let agent = Agent::start(&[]);
    let mut w = paused_steps(&cg, 4 * MIB, 5);
    let pid = w.pid();
    let mut c = w.checkpoint();
    for _ in 0..1 {
        agent.wait_for_checkpoint(&c);
        w.resume();
        c = w.checkpoint();
    }
    agent.wait_for_checkpoint(&c); // step-2: 8 MiB held
    let target = format!("pid:{pid}");
    let (ok, _, err) = agent.limit(&["set", &format!("{target}=14MiB")]);
    assert!(ok, "{err}");
    assert_eq!(rule(&agent.limits(), &target).unwrap().usage, 8 * MIB, "what it held counts");
    let (seen, status) = w.until_exit();
    let names: Vec<&str> = seen.iter().map(|c| c.checkpoint.as_str()).collect();
    assert_eq!(names, ["step-3"], "8 + 4 fits under 14 MiB, 8 + 4 + 4 does not");
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
    let lines = agent.wait_for_exit(pid);
    let l = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!((l.len(), l[0].usage, l[0].request), (1, 12 * MIB, 4 * MIB));
    wait_until("the carried memory to leave with the process", || {
        rule(&agent.limits(), &target).unwrap().usage == 0
    });
}

#[test]
fn carried_memory_leaves_the_limit_as_it_is_freed() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-carried");
    let target = format!("cgroup:{}", cg.path);
    let agent = Agent::start(&[]);
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let allocated = w.checkpoint();
    agent.wait_for_checkpoint(&allocated);
    let (ok, _, err) = agent.limit(&["set", &format!("{target}=1GiB,action=audit")]);
    assert!(ok, "{err}");
    assert_eq!(rule(&agent.limits(), &target).unwrap().usage, allocated.held);
    w.resume();
    let freed = w.checkpoint();
    agent.wait_for_checkpoint(&freed);
    assert!(freed.held < allocated.held);
    wait_until("the freed memory to leave the limit", || {
        rule(&agent.limits(), &target).unwrap().usage == freed.held
    });
    w.run_to_end();
    wait_until("the rest to leave at exit", || rule(&agent.limits(), &target).unwrap().usage == 0);
    // Bad input is refused by the CLI before it reaches the agent.
    let (ok, _, err) = agent.limit(&["set", "cgroup:/x=0"]);
    assert!(!ok && err.contains("cgroup:/x=0"), "{err}");
}

#[test]
fn sighup_rereads_the_config_file() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-hup");
    let scratch = scratch();
    let config = scratch.path().join("gpumem.toml");
    let write = |text: String| std::fs::write(&config, text).unwrap();
    write(format!("[[limit]]\ncgroup = \"{}\"\nhard = \"100MiB\"\naction = \"audit\"\n", cg.path));
    let agent = Agent::start(&["--config", config.to_str().unwrap()]);
    let target = format!("cgroup:{}", cg.path);
    assert_eq!(rule(&agent.limits(), &target).unwrap().hard, 100 * MIB);

    write(format!("[[limit]]\ncgroup = \"{}\"\nhard = \"6MiB\"\n", cg.path));
    agent.signal(Signal::SIGHUP);
    wait_until("the reloaded limit", || rule(&agent.limits(), &target).is_some_and(|r| r.hard == 6 * MIB));
    let (seen, status) = paused_steps(&cg, 4 * MIB, 3).until_exit();
    assert_eq!(seen.len(), 1);
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "the file's default action: signal:SIGKILL");

    // A broken file changes nothing and says why.
    write("[[limit]]\ncgroup = \"/no/such/cgroup\"\nhard = \"1GiB\"\n".to_string());
    agent.signal(Signal::SIGHUP);
    wait_until("the reload error", || agent.stderr().contains("not reloaded"));
    assert_eq!(rule(&agent.limits(), &target).unwrap().hard, 6 * MIB);

    // A rule taken out of the file is cleared.
    write(String::new());
    agent.signal(Signal::SIGHUP);
    wait_until("the limit cleared", || agent.limits().is_empty());
}

/// The kernel keeps each cgroup's walk of its ancestors' limits
/// (`CGROUP_LIMITS`) until the agent changes its index: a walk kept from
/// before a parent's limit was set would let a process deep below it run
/// past that limit. Another cgroup's rule is in force from the start, so
/// the deep cgroup's walk is made and kept before the parent's limit.
#[test]
fn a_limit_set_at_run_time_on_a_parent_cgroup_stops_a_process_deep_below_it() {
    if !privileged() {
        return;
    }
    let other = Cgroup::create("walk-other");
    let deep = Cgroup::create_nested("walk", &["a", "b", "c"]);
    let parent = deep.path.trim_end_matches("/b/c").to_string();
    let agent = Agent::start(&["--limit", &format!("cgroup:{}=1GiB,action=audit", other.path)]);
    let mut w = paused_steps(&deep, 4 * MIB, 5);
    let pid = w.pid();
    let c = w.checkpoint(); // step-1
    agent.wait_for_checkpoint(&c);
    w.resume();
    let c = w.checkpoint(); // step-2: 8 MiB held, walked with no limit on the way
    agent.wait_for_checkpoint(&c);

    let target = format!("cgroup:{parent}");
    let (ok, _, err) = agent.limit(&["set", &format!("{target}=14MiB,action=signal:SIGKILL")]);
    assert!(ok, "{err}");
    assert_eq!(rule(&agent.limits(), &target).unwrap().usage, 8 * MIB, "what the subtree held counts");
    let (seen, status) = w.until_exit();
    let names: Vec<&str> = seen.iter().map(|c| c.checkpoint.as_str()).collect();
    assert_eq!(names, ["step-3"], "8 + 4 fits under the parent's 14 MiB, 8 + 4 + 4 does not");
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
    let lines = agent.wait_for_exit(pid);
    let l = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!((l.len(), l[0].usage, l[0].limit_bytes), (1, 12 * MIB, 14 * MIB), "{l:?}");

    // Cleared: the next process there runs to its end.
    let (ok, _, err) = agent.limit(&["clear", &target]);
    assert!(ok, "{err}");
    let (seen, status) = paused_steps(&deep, 4 * MIB, 5).until_exit();
    assert!(status.success(), "{status:?}");
    assert_eq!(seen.last().unwrap().checkpoint, "done");
}
