//! Limits a container declares bind the whole container: a declaration in
//! one of its processes becomes a rule on the container's cgroup, which
//! binds its processes that carry no variable too (a shell `podman exec`
//! opened, a child that dropped its environment); the smaller of two
//! declarations holds; the rule goes with the container's cgroup. Here on
//! a cgroup named as podman names a container's (`libpod-<id>`), so it
//! runs in the kernel matrix too, with `deny` where the kernel can; the
//! `containers` suite does the same with podman itself.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::DecisionEvent;
use gpumem_tests::harness::*;
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;
const ID: &str = "4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

fn steps(cg: &Cgroup, size: u64, n: u32, device: u32, env: &[(&str, &str)]) -> Workload {
    let (size, n, device) = (size.to_string(), n.to_string(), device.to_string());
    let args = ["--scenario", "steps", "--size", &size, "--iterations", &n, "--device", &device, "--pause"];
    Workload::spawn(&args, Some(cg), env)
}

/// The container's rules, once the agent has made them of a declaration.
fn container_rules(agent: &Agent, cgroup: &str) -> Vec<gpumem::output::LimitStatus> {
    let target = format!("cgroup:{cgroup}");
    agent.wait_for_state(
        "the container's rules",
        || agent.limits().into_iter().filter(|l| l.target == target).collect::<Vec<_>>(),
        |rules| !rules.is_empty(),
    )
}

#[test]
fn a_declaration_binds_every_process_of_its_container() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create_nested("declared-container", &[&format!("libpod-{ID}")]);
    let agent = Agent::start(&[]);
    let denies = register_write_refusal().is_none();
    // Declared by name, listed by number as every rule's signal is.
    let (action, listed) = if denies { ("deny", "deny") } else { ("signal:SIGKILL", "signal:9") };
    let declaring = format!("64MiB,action={action}");
    let mut main = steps(&cg, 16 * MIB, 5, 0, &[("GPUMEM_LIMIT", &declaring)]);
    for step in ["step-1", "step-2", "step-3"] {
        assert_eq!(main.checkpoint().checkpoint, step);
        if step != "step-3" {
            main.resume();
        }
    }
    let main_pid = main.pid();
    let rules = container_rules(&agent, &cg.path);
    assert_eq!((rules.len(), rules[0].hard, rules[0].action.as_str()), (1, 64 * MIB, listed), "{rules:?}");
    let source = format!("env GPUMEM_LIMIT of pid {main_pid} in container {}", &ID[..12]);
    assert_eq!(rules[0].source.as_deref(), Some(source.as_str()));
    assert_eq!(rules[0].usage, 48 * MIB, "what the container held when its rule was made");
    // A process of the container with no variable: 48 + 8 + 8 fit, the
    // third would cross the container's 64 MiB.
    let other = steps(&cg, 8 * MIB, 3, 0, &[]);
    let other_pid = other.pid();
    let (seen, status) = other.resumed_to_exit();
    assert_eq!(seen, ["step-1", "step-2"]);
    refused(denies, status);
    let lines = agent.wait_for("its decision", |l| !l.decisions(other_pid, DecisionEvent::Limit).is_empty());
    let d = lines.decisions(other_pid, DecisionEvent::Limit)[0];
    assert_eq!(
        (d.limit.as_str(), d.source.as_deref()),
        (format!("cgroup:{}", cg.path).as_str(), Some(source.as_str()))
    );
    assert_eq!((d.usage, d.request), (64 * MIB, 8 * MIB));
    // The other's 16 MiB went with it: 48 + 16 fit again, 64 + 16 do not.
    let (seen, status) = main.resumed_to_exit();
    assert_eq!(seen, ["step-4"]);
    refused(denies, status);
    let target = format!("cgroup:{}", cg.path);
    drop(cg);
    agent.wait_for_state(
        "the container's rule to go with its cgroup",
        || agent.limits().into_iter().filter(|l| l.target == target).count(),
        |&n| n == 0,
    );
}

#[test]
fn the_smaller_of_two_declarations_holds_for_the_container() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create_nested("declared-smaller", &[&format!("libpod-{ID}")]);
    let agent = Agent::start(&[]);
    let mut first = steps(&cg, MIB, 1, 0, &[("GPUMEM_LIMIT", "64MiB")]);
    assert_eq!(first.checkpoint().checkpoint, "step-1");
    container_rules(&agent, &cg.path);
    let mut second = steps(&cg, MIB, 1, 0, &[("GPUMEM_LIMIT", "32MiB")]);
    let mut third = steps(&cg, MIB, 1, 0, &[("GPUMEM_LIMIT", "1GiB")]);
    let (p1, p2, p3) = (first.pid(), second.pid(), third.pid());
    for w in [&mut second, &mut third] {
        assert_eq!(w.checkpoint().checkpoint, "step-1");
    }
    let lines =
        agent.wait_for("three declared records", |l| [p1, p2, p3].iter().all(|&p| !l.declared(p).is_empty()));
    let outcome = |pid| {
        let c = lines.declared(pid)[0].container_limit.clone().unwrap_or_else(|| panic!("pid {pid}: none"));
        (format!("{:?}", c.outcome), c.held_by)
    };
    assert_eq!(outcome(p1), ("Set".into(), vec![p1]));
    assert_eq!(outcome(p2), ("Tightened".into(), vec![p2]));
    assert_eq!(outcome(p3), ("Kept".into(), vec![p2]), "the larger does not loosen it");
    let rules = container_rules(&agent, &cg.path);
    assert_eq!(rules[0].hard, 32 * MIB, "{rules:?}");
    assert_eq!(rules[0].usage, 3 * MIB, "the container's three processes");
}

/// The workload was refused its call: denied (it says so and exits 1) or
/// killed.
fn refused(denies: bool, status: std::process::ExitStatus) {
    if denies {
        assert_eq!(status.code(), Some(1), "denied, the workload reports the refusal: {status:?}");
    } else {
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
    }
}
