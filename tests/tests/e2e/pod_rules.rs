//! The operator's rules on Kubernetes pods (`namespace:NS`, `pod:NS/GLOB`)
//! on a node's layout as the kubelet makes it (both cgroup drivers; the
//! kubelet itself does not run here): each matching pod gets the rule on
//! its own cgroup, a pod of another namespace none; of two rules on one
//! pod the smaller holds; a pod started after the agent gets its rule; a
//! pod's rule goes with its cgroup.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::LimitStatus;
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
