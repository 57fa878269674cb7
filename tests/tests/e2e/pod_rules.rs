//! The operator's rules on Kubernetes pods (`namespace:NS`, `pod:NS/GLOB`)
//! on a node's layout as the kubelet makes it (both cgroup drivers; the
//! kubelet itself does not run here): each matching pod gets the rule on
//! its own cgroup, a pod of another namespace none; of two rules on one
//! pod the smaller holds; a pod started after the agent gets its rule; a
//! pod's rule goes with its cgroup.
use std::{
    os::unix::process::{CommandExt, ExitStatusExt},
    process::{Child, Command, Stdio},
};

use gpumem::output::{DecisionEvent, LimitStatus, RecordEvent};
use gpumem_tests::harness::*;

const MIB: u64 = 1 << 20;

/// `n` steps of `size` bytes in `pod`'s container, paused at each.
fn steps(pod: &KubePod, size: u64, n: u32) -> Workload {
    let (size, n) = (size.to_string(), n.to_string());
    let args = ["--scenario", "steps", "--size", &size, "--iterations", &n, "--pause"];
    Workload::spawn(&args, Some(&pod.container), &[])
}

/// The rules made for `pods`, once there is one on each, by pod.
fn rules_of(agent: &Agent, pods: &[&KubePod]) -> Vec<LimitStatus> {
    let targets: Vec<String> = pods.iter().map(|p| format!("cgroup:{}", p.pod_path)).collect();
    let found = agent.wait_for_state(
        "a rule on each pod",
        || agent.limits().into_iter().filter(|l| targets.contains(&l.target)).collect::<Vec<_>>(),
        |rules| targets.iter().all(|t| rules.iter().any(|r| &r.target == t)),
    );
    targets.iter().map(|t| found.iter().find(|r| &r.target == t).unwrap().clone()).collect()
}

/// A test's pod UID (36 characters) and container id (64 hex digits).
fn ids(n: u8) -> (String, String) {
    (format!("{n:02x}e1f2a3-4c5d-4e7f-8091-a2b3c4d5e6f7"), format!("{n:02x}").repeat(32))
}

fn each_pod_of_a_namespace_is_limited_on_its_own(driver: Driver) {
    let node = format!("kube-{driver:?}").to_lowercase();
    let pod = |n: u8, ns: &str, name: &str| {
        let (uid, id) = ids(n);
        KubePod::make(driver, &node, (ns, name, &uid), &id)
    };
    let (a0, a1, b0) =
        (pod(1, "gpumem-a", "trainer-0"), pod(2, "gpumem-a", "serve-0"), pod(3, "gpumem-b", "trainer-0"));
    let agent = Agent::start(&["--limit", "namespace:gpumem-a=40MiB,action=signal:SIGKILL"]);
    let rules = rules_of(&agent, &[&a0, &a1]);
    let sources: Vec<Option<String>> = rules.iter().map(|r| r.source.clone()).collect();
    assert_eq!(
        sources,
        [
            Some("namespace:gpumem-a, pod gpumem-a/trainer-0".to_string()),
            Some("namespace:gpumem-a, pod gpumem-a/serve-0".to_string())
        ]
    );
    assert!(rules.iter().all(|r| r.hard == 40 * MIB && r.action == "signal:9"), "{rules:?}");
    let (ok, listed, err) = agent.limit(&["list"]);
    let row = listed.lines().find(|l| l.contains(&a0.pod_path)).unwrap_or_else(|| panic!("{listed}"));
    assert!(ok && row.trim_end().ends_with("namespace:gpumem-a, pod gpumem-a/trainer-0"), "{row}\n{err}");
    assert!(
        !agent.limits().iter().any(|l| l.target == format!("cgroup:{}", b0.pod_path)),
        "a pod of another namespace gets no rule"
    );
    // Each pod holds 32 MiB (64 together, over 40: each has its own), and
    // each is stopped at the call that would take it to 48.
    let mut ws = [steps(&a0, 16 * MIB, 3), steps(&a1, 16 * MIB, 3)];
    for w in &mut ws {
        assert_eq!(w.checkpoint().checkpoint, "step-1");
        w.resume();
        assert_eq!(w.checkpoint().checkpoint, "step-2");
    }
    let rules = rules_of(&agent, &[&a0, &a1]);
    assert_eq!((rules[0].usage, rules[1].usage), (32 * MIB, 32 * MIB));
    for mut w in ws {
        w.resume();
        let (seen, status) = w.until_exit();
        assert!(seen.is_empty(), "{seen:?}");
        assert_eq!(status.signal(), Some(9), "killed at the crossing");
    }
    let (seen, status) = steps(&b0, 16 * MIB, 3).resumed_to_exit();
    assert_eq!((seen.last().map(String::as_str), status.success()), (Some("done"), true), "team b: no limit");
}

#[test]
fn each_pod_of_a_namespace_is_limited_on_its_own_systemd() {
    if privileged() {
        each_pod_of_a_namespace_is_limited_on_its_own(Driver::Systemd);
    }
}

#[test]
fn each_pod_of_a_namespace_is_limited_on_its_own_cgroupfs() {
    if privileged() {
        each_pod_of_a_namespace_is_limited_on_its_own(Driver::Cgroupfs);
    }
}

#[test]
fn a_pod_glob_tightens_and_rules_follow_pods_that_come_and_go() {
    if !privileged() {
        return;
    }
    let node = "kube-glob";
    let (uid, id) = ids(4);
    let serve = KubePod::make(Driver::Systemd, node, ("gpumem-c", "serve-0", &uid), &id);
    let agent = Agent::start(&[
        "--limit",
        "namespace:gpumem-c=64MiB,action=signal:SIGKILL",
        "--limit",
        "pod:gpumem-c/trainer-*=24MiB,action=signal:SIGKILL",
    ]);
    assert_eq!(rules_of(&agent, &[&serve])[0].hard, 64 * MIB);
    // A pod started after the agent: the smaller of its two rules.
    let (uid, id) = ids(5);
    let trainer = KubePod::make(Driver::Systemd, node, ("gpumem-c", "trainer-7d9f8-x2x4q", &uid), &id);
    let rule = rules_of(&agent, &[&trainer]).remove(0);
    assert_eq!(
        (rule.hard, rule.source.as_deref()),
        (24 * MIB, Some("pod:gpumem-c/trainer-*, pod gpumem-c/trainer-7d9f8-x2x4q"))
    );
    let (seen, status) = steps(&trainer, 16 * MIB, 2).resumed_to_exit();
    assert_eq!((seen, status.signal()), (vec!["step-1".to_string()], Some(9)), "16 fit, 32 cross 24");
    // A pod gone: its rule with it.
    let target = format!("cgroup:{}", serve.pod_path);
    drop(serve);
    agent.wait_for_state(
        "the gone pod's rule to go",
        || agent.limits().into_iter().filter(|l| l.target == target).count(),
        |&n| n == 0,
    );
}

/// The C client whose first CUDA call after its exec allocates `size`,
/// started in `pod`'s container (its exec is the container's first).
fn first_alloc(pod: &KubePod, size: u64) -> Child {
    let p = paths();
    let mut cmd = Command::new(&p.first_alloc);
    cmd.arg(&p.libcuda).arg(size.to_string()).stdout(Stdio::piped());
    let procs = pod.container.dir.join("cgroup.procs");
    // SAFETY: only async-signal-safe work between fork and exec: open,
    // write and close through std's thin wrappers.
    unsafe {
        cmd.pre_exec(move || std::fs::write(&procs, b"0"));
    }
    cmd.spawn().expect("running first-alloc")
}

#[test]
fn a_new_pod_is_held_at_exec_until_its_rule_is_made() {
    if !privileged() {
        return;
    }
    let node = "kube-held";
    let (uid, id) = ids(6);
    // The node's kubepods cgroups exist before the agent, as on a node.
    let _other = KubePod::make(Driver::Systemd, node, ("gpumem-other", "web-0", &uid), &id);
    let agent = Agent::start(&["--limit", "namespace:gpumem-d=1MiB,action=signal:SIGKILL"]);
    let (uid, id) = ids(7);
    let mut pod = KubePod::unnamed(Driver::Systemd, node, &uid, &id);
    let child = first_alloc(&pod, 2 * MIB);
    let pid = child.id();
    wait_until("the kernel to hold the pod's first process at its exec", || stopped(pid));
    let target = format!("cgroup:{}", pod.pod_path);
    assert!(!agent.limits().iter().any(|l| l.target == target), "nothing names the pod yet: no rule");
    // The kubelet names the pod: its rule is made, then it goes on, and
    // its first allocation (2 MiB) crosses the pod's 1 MiB.
    pod.name("gpumem-d", "trainer-0");
    let out = child.wait_with_output().expect("waiting for first-alloc");
    assert_eq!(out.status.signal(), Some(9), "killed at its first allocation: {out:?}");
    let lines = agent.wait_for("its held record and its decision", |l| {
        !l.held(pid).is_empty() && !l.decisions(pid, DecisionEvent::Limit).is_empty()
    });
    let held = lines.held(pid)[0];
    assert_eq!((held.resumed, held.pod_cgroup.as_deref()), (true, Some(pod.pod_path.as_str())));
    let d = lines.decisions(pid, DecisionEvent::Limit)[0];
    assert_eq!(
        (d.limit.as_str(), d.source.as_deref(), d.request),
        (target.as_str(), Some("namespace:gpumem-d, pod gpumem-d/trainer-0"), 2 * MIB)
    );
    assert!(lines.events(pid, RecordEvent::Alloc).is_empty(), "nothing was charged");
}

#[test]
fn every_new_pods_first_allocation_is_bound() {
    if !privileged() {
        return;
    }
    let node = "kube-race";
    let (uid, id) = ids(8);
    let _other = KubePod::make(Driver::Cgroupfs, node, ("gpumem-other", "web-0", &uid), &id);
    let agent = Agent::start(&["--limit", "namespace:gpumem-e=1MiB,action=signal:SIGKILL"]);
    // The agent reads 5,000 records a second beside it.
    let busy = Cgroup::create("kube-race-load");
    let load = Workload::spawn(
        &["--scenario", "loop", "--iterations", "100000000", "--rate", "5000"],
        Some(&busy),
        &[],
    );
    let mut pids = Vec::new();
    // 40 pods on the host; 10 in the kernel matrix's guests, where each
    // takes about a second under emulation.
    let pods = if emulated() { 10 } else { 40 };
    for run in 0..pods {
        let (uid, id) = ids(100 + run);
        let pod = KubePod::make(Driver::Cgroupfs, node, ("gpumem-e", &format!("job-{run}"), &uid), &id);
        let child = first_alloc(&pod, 2 * MIB);
        pids.push(child.id());
        let out = child.wait_with_output().expect("waiting for first-alloc");
        assert_eq!(out.status.signal(), Some(9), "run {run}: the first allocation was not stopped: {out:?}");
    }
    drop(load);
    let lines = agent.lines();
    assert!(
        lines.all_events(RecordEvent::Alloc).iter().all(|a| !pids.contains(&a.caller.pid)),
        "no first allocation was charged"
    );
}

/// A pod's first process, held at exec by an agent that is then killed.
fn held_by_a_killed_agent(node: &str, n: u8, args: &[&str]) -> (KubePod, Child) {
    let (uid, id) = ids(n);
    let _other = KubePod::make(Driver::Systemd, node, ("gpumem-other", "web-0", &uid), &id);
    let agent = Agent::start(args);
    let (uid, id) = ids(n + 1);
    let pod = KubePod::unnamed(Driver::Systemd, node, &uid, &id);
    let child = first_alloc(&pod, 2 * MIB);
    wait_until("the kernel to hold the pod's first process", || stopped(child.id()));
    agent.kill();
    assert!(stopped(child.id()), "still held: no agent let it go on");
    (pod, child)
}

#[test]
fn a_process_held_by_an_agent_that_died_goes_on_when_the_next_starts() {
    if !privileged() {
        return;
    }
    let rule = ["--limit", "namespace:gpumem-f=1MiB,action=signal:SIGKILL"];
    let (_pod, child) = held_by_a_killed_agent("kube-orphan", 20, &rule);
    // The next agent (its maps are new: the held process is not in them)
    // lets every stopped process of a pod go on; nothing names this pod,
    // so no rule is on it, and its 2 MiB are allocated.
    let next = Agent::start(&rule);
    let out = child.wait_with_output().expect("waiting for first-alloc");
    assert!(out.status.success(), "{out:?}");
    assert!(next.stderr().contains("was stopped in a pod's cgroup"), "{}", next.stderr());
}

#[test]
fn a_process_held_by_an_agent_that_died_waits_for_its_successors_rule_with_persist() {
    if !privileged() {
        return;
    }
    let pins = PinDir::new("pods-held");
    let args = [&pins.run_args()[..], &["--limit", "namespace:gpumem-g=1MiB,action=signal:SIGKILL"]].concat();
    let (mut pod, child) = held_by_a_killed_agent("kube-persist", 22, &args);
    // The successor adopts the held process from the pinned maps: it goes
    // on once its pod's rule is made, and its first allocation is stopped.
    let next = Agent::start(&args);
    pod.name("gpumem-g", "trainer-0");
    let pid = child.id();
    let out = child.wait_with_output().expect("waiting for first-alloc");
    assert_eq!(out.status.signal(), Some(9), "killed at its first allocation: {out:?}");
    let lines = next.wait_for("its held record", |l| !l.held(pid).is_empty());
    assert!(lines.held(pid)[0].resumed);
    drop(next);
    let _ = pins.detach();
}

#[test]
fn a_namespace_total_counts_its_pods_together_and_follows_them() {
    if !privileged() {
        return;
    }
    let node = "kube-total";
    let pod = |n: u8, ns: &str, name: &str| {
        let (uid, id) = ids(n);
        KubePod::make(Driver::Systemd, node, (ns, name, &uid), &id)
    };
    let (p0, p1, other) =
        (pod(30, "gpumem-t", "a-0"), pod(31, "gpumem-t", "b-0"), pod(32, "gpumem-u", "a-0"));
    let agent = Agent::start(&["--limit", "namespace:gpumem-t=40MiB,per=namespace,action=signal:SIGKILL"]);
    let target = "namespace:gpumem-t,per=namespace";
    let total = |agent: &Agent| agent.limits().into_iter().find(|l| l.target == target);
    agent.wait_for_state("the namespace's total", || total(&agent), Option::is_some);
    // 16 MiB in each of its two pods: one count, 32 MiB.
    let (mut w0, mut w1) = (steps(&p0, 16 * MIB, 2), steps(&p1, 16 * MIB, 2));
    for w in [&mut w0, &mut w1] {
        assert_eq!(w.checkpoint().checkpoint, "step-1");
    }
    agent.wait_for_state("32 MiB counted", || total(&agent).map(|l| l.usage), |u| *u == Some(32 * MIB));
    // A pod of the namespace started now joins the count: its first 16 MiB
    // would take it to 48.
    let p2 = pod(33, "gpumem-t", "c-0");
    let (seen, status) = steps(&p2, 16 * MIB, 1).resumed_to_exit();
    assert_eq!((seen, status.signal()), (vec![], Some(9)), "killed at its first allocation");
    // Another namespace's pod is not counted.
    let (seen, status) = steps(&other, 16 * MIB, 2).resumed_to_exit();
    assert_eq!((seen.last().map(String::as_str), status.success()), (Some("done"), true));
    // The first pod's next 16 MiB would take the count to 48: it is
    // killed, its 16 MiB leave the count, and the second's next 16 fit.
    let (seen, status) = w0.resumed_to_exit();
    assert_eq!((seen, status.signal()), (vec![], Some(9)));
    agent.wait_for_state("16 MiB counted", || total(&agent).map(|l| l.usage), |u| *u == Some(16 * MIB));
    let (seen, status) = w1.resumed_to_exit();
    assert_eq!((seen, status.success()), (vec!["step-2".to_string(), "done".into()], true));
}

#[test]
fn a_namespace_total_is_taken_over_by_a_persist_successor_with_its_count() {
    if !privileged() {
        return;
    }
    let pins = PinDir::new("pods-total");
    let rule = ["--limit", "namespace:gpumem-v=40MiB,per=namespace,action=signal:SIGKILL"];
    let args = [&pins.run_args()[..], &rule].concat();
    let node = "kube-total-persist";
    let pod = |n: u8, name: &str| {
        let (uid, id) = ids(n);
        KubePod::make(Driver::Systemd, node, ("gpumem-v", name, &uid), &id)
    };
    let (p0, p1) = (pod(40, "a-0"), pod(41, "b-0"));
    let first = Agent::start(&args);
    let target = "namespace:gpumem-v,per=namespace";
    let usage = |agent: &Agent| agent.limits().into_iter().find(|l| l.target == target).map(|l| l.usage);
    let (mut w0, mut w1) = (steps(&p0, 16 * MIB, 2), steps(&p1, 16 * MIB, 2));
    for w in [&mut w0, &mut w1] {
        assert_eq!(w.checkpoint().checkpoint, "step-1");
    }
    first.wait_for_state("32 MiB counted", || usage(&first), |u| *u == Some(32 * MIB));
    first.kill();
    // The successor finds the rule over two cgroups, takes it for the
    // policy's total, and counts what the pods hold.
    let next = Agent::start(&args);
    next.wait_for_state("the total again, 32 MiB", || usage(&next), |u| *u == Some(32 * MIB));
    let limits = next.limits();
    assert!(!limits.iter().any(|l| l.target.contains("adopted")), "{limits:?}");
    let p2 = pod(42, "c-0");
    let (seen, status) = steps(&p2, 16 * MIB, 1).resumed_to_exit();
    assert_eq!((seen, status.signal()), (vec![], Some(9)), "32 + 16 > 40");
    drop((w0, w1, next));
    let _ = pins.detach();
}
