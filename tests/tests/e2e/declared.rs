//! Limits a workload declares in its own environment (`GPUMEM_LIMIT`,
//! HAMi's `CUDA_DEVICE_MEMORY_LIMIT[_i]`, NVIDIA's and KAI's), read by the
//! kernel at the process's exec: bound from its very first allocation,
//! whatever the agent is doing; never looser than the operator's rules;
//! clamped to the operator's cap; off with `--env-limits none`.
use std::{os::unix::process::ExitStatusExt, process::Command};

use gpumem::output::{DecisionEvent, RecordEvent};
use gpumem_tests::harness::*;
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;

/// `steps` of `size` bytes `n` times on `device`, in `cg`, with `env`.
fn steps(cg: &Cgroup, size: u64, n: u32, device: u32, env: &[(&str, &str)]) -> Workload {
    let (size, n, device) = (size.to_string(), n.to_string(), device.to_string());
    let args = ["--scenario", "steps", "--size", &size, "--iterations", &n, "--device", &device];
    Workload::spawn(&args, Some(cg), env)
}

/// The checkpoints a workload reached, and whether SIGKILL ended it.
fn reached(w: Workload) -> (Vec<String>, bool) {
    let (seen, status) = w.until_exit();
    (seen.into_iter().map(|c| c.checkpoint).collect(), status.signal() == Some(Signal::SIGKILL as i32))
}

#[test]
fn a_declaring_process_is_stopped_at_the_call_that_crosses_its_limit() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-gpumem");
    let agent = Agent::start(&[]);
    let mut w = Workload::spawn(
        &["--scenario", "steps", "--size", &(3 * MIB).to_string(), "--iterations", "5", "--pause"],
        Some(&cg),
        &[("GPUMEM_LIMIT", "10MiB")],
    );
    let pid = w.pid();
    assert_eq!(w.checkpoint().checkpoint, "step-1");
    let listed = agent.limits();
    let rule = rule(&listed, &format!("pid:{pid}")).unwrap_or_else(|| panic!("not listed: {listed:?}"));
    assert_eq!((rule.hard, rule.usage, rule.device), (10 * MIB, 3 * MIB, None));
    assert_eq!((rule.source.as_deref(), rule.action.as_str()), (Some("env GPUMEM_LIMIT"), "signal:9"));
    w.resume();
    let (seen, killed) = reached(w);
    // 3 + 3 + 3 fit in 10 MiB; the fourth would not.
    assert_eq!(seen, ["step-2", "step-3"]);
    assert!(killed);
    let lines = agent.wait_for_exit(pid);
    let declared = lines.declared(pid);
    assert_eq!(declared.len(), 1, "{declared:?}");
    let l = &declared[0].limits;
    assert_eq!((l.len(), l[0].variable.as_str(), l[0].hard), (1, "GPUMEM_LIMIT", 10 * MIB));
    assert_eq!(l[0].text.as_deref(), Some("10MiB"));
    let limits = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!(limits.len(), 1, "{limits:?}");
    let d = limits[0];
    assert_eq!(d.limit, format!("env GPUMEM_LIMIT of pid {pid}"));
    assert_eq!((d.usage, d.request, d.limit_bytes), (9 * MIB, 3 * MIB, 10 * MIB));
    assert_eq!((d.action.as_str(), d.source.as_deref()), ("signal:9", Some("env")));
    assert_eq!(lines.count(pid, RecordEvent::Alloc), 3, "the refused call was not charged");
    assert!(agent.limits().iter().all(|l| l.target != format!("pid:{pid}")), "gone with its process");
}

#[test]
fn hami_limits_each_device_on_its_own() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-hami");
    let agent = Agent::start(&[]);
    let env = [("CUDA_DEVICE_MEMORY_LIMIT", "8m"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "4m")];
    let on0 = steps(&cg, 3 * MIB, 4, 0, &env);
    let on1 = steps(&cg, 3 * MIB, 4, 1, &env);
    let (pid0, pid1) = (on0.pid(), on1.pid());
    assert_eq!(reached(on0), (vec!["step-1".to_string(), "step-2".into()], true), "device 0: 8 MiB");
    assert_eq!(reached(on1), (vec!["step-1".to_string()], true), "device 1: 4 MiB");
    let lines = agent.wait_for_exit(pid0);
    let lines = if lines.count(pid1, RecordEvent::Exit) > 0 { lines } else { agent.wait_for_exit(pid1) };
    let d0 = lines.decisions(pid0, DecisionEvent::Limit);
    assert_eq!(d0[0].limit, format!("env CUDA_DEVICE_MEMORY_LIMIT of pid {pid0}"));
    assert_eq!((d0[0].usage, d0[0].limit_bytes), (6 * MIB, 8 * MIB));
    let d1 = lines.decisions(pid1, DecisionEvent::Limit);
    assert_eq!(d1[0].limit, format!("env CUDA_DEVICE_MEMORY_LIMIT_1 of pid {pid1}"));
    assert_eq!((d1[0].usage, d1[0].limit_bytes), (3 * MIB, 4 * MIB));
    let declared = &lines.declared(pid1)[0].limits;
    let each: Vec<(&str, Option<&Vec<u32>>, u64)> =
        declared.iter().map(|l| (l.variable.as_str(), l.devices.as_ref(), l.hard)).collect();
    assert_eq!(each[0], ("CUDA_DEVICE_MEMORY_LIMIT", Some(&[0].into_iter().chain(2..16).collect()), 8 * MIB));
    assert_eq!(each[1], ("CUDA_DEVICE_MEMORY_LIMIT_1", Some(&vec![1]), 4 * MIB));
}

#[test]
fn an_operator_rule_holds_under_a_larger_declaration_and_the_cap_clamps_one() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-operator");
    let agent = Agent::start(&["--limit", &format!("cgroup:{}=8MiB", cg.path), "--env-limits-max", "5MiB"]);
    // Declared 1 GiB, clamped to 5 MiB: 3 fit, the second call crosses it
    // (not yet the cgroup's 8).
    let w = steps(&cg, 3 * MIB, 4, 0, &[("GPUMEM_LIMIT", "1GiB")]);
    let pid = w.pid();
    assert_eq!(reached(w), (vec!["step-1".to_string()], true));
    let lines = agent.wait_for_exit(pid);
    let declared = &lines.declared(pid)[0];
    assert_eq!((declared.limits[0].hard, declared.limits[0].clamped), (5 * MIB, true));
    assert_eq!(declared.clamped_to, Some(5 * MIB));
    assert_eq!(lines.decisions(pid, DecisionEvent::Limit)[0].limit, format!("env GPUMEM_LIMIT of pid {pid}"));
    // Declared 1 GiB under no cap here: the operator's 8 MiB holds.
    drop(agent);
    let agent = Agent::start(&["--limit", &format!("cgroup:{}=8MiB", cg.path)]);
    let w = steps(&cg, 3 * MIB, 4, 0, &[("GPUMEM_LIMIT", "1GiB")]);
    let pid = w.pid();
    assert_eq!(reached(w), (vec!["step-1".to_string(), "step-2".into()], true));
    let lines = agent.wait_for_exit(pid);
    assert_eq!(lines.decisions(pid, DecisionEvent::Limit)[0].limit, format!("cgroup:{}", cg.path));
}

#[test]
fn env_limits_none_and_unlisted_variables_change_nothing() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-none");
    for honoured in ["none", "CUDA_DEVICE_MEMORY_LIMIT"] {
        let agent = Agent::start(&["--env-limits", honoured]);
        let w = steps(&cg, 3 * MIB, 4, 0, &[("GPUMEM_LIMIT", "4MiB")]);
        let pid = w.pid();
        // Killed: a limit held it; not killed short of `done`: its call
        // failed (the workload's stderr says why).
        let (seen, killed) = reached(w);
        assert_eq!(
            (seen.last().map(String::as_str), killed),
            (Some("done"), false),
            "--env-limits {honoured}: {seen:?}"
        );
        let lines = agent.wait_for_exit(pid);
        assert!(lines.declared(pid).is_empty() && lines.decisions(pid, DecisionEvent::Limit).is_empty());
    }
}

#[test]
fn a_refused_declaration_says_why_and_binds_nothing() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-refused");
    let agent = Agent::start(&[]);
    let env = [("GPUMEM_LIMIT", "8GiB,colour=red"), ("NVIDIA_GPU_MEMORY_LIMIT", "1G")];
    let w = steps(&cg, MIB, 2, 0, &env);
    let pid = w.pid();
    assert_eq!(reached(w).0.last().map(String::as_str), Some("done"));
    let lines = agent.wait_for_exit(pid);
    let d = &lines.declared(pid)[0];
    assert!(d.limits.is_empty(), "{d:?}");
    let why: Vec<(&str, &str)> = d.refused.iter().map(|r| (r.variable.as_str(), r.reason.as_str())).collect();
    assert_eq!(why[0].0, "GPUMEM_LIMIT");
    assert!(why[0].1.contains("`colour`") && why[0].1.contains("unknown key"), "{why:?}");
    assert_eq!(why[1].0, "NVIDIA_GPU_MEMORY_LIMIT");
    assert!(why[1].1.contains("whole number of MiB"), "{why:?}");
}

#[test]
fn a_forked_child_is_bound_by_its_own_copy_of_the_parents_declaration() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-fork");
    let agent = Agent::start(&[]);
    // The parent allocates 5 MiB, its child 2 MiB: each crosses 1 MiB on
    // its own count (audit: both go on).
    let w = Workload::spawn(&["--scenario", "fork"], Some(&cg), &[("GPUMEM_LIMIT", "1MiB,action=audit")]);
    let pid = w.pid();
    let (seen, status) = w.until_exit();
    assert!(status.success(), "{status:?}");
    let child = seen.iter().find(|c| c.checkpoint == "child").expect("the child's checkpoint").pid;
    let lines = agent.wait_for_exit(pid);
    let parent = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!((parent.len(), parent[0].usage, parent[0].request), (1, 0, 5 * MIB), "{parent:?}");
    let of_child = lines.decisions(child, DecisionEvent::Limit);
    assert_eq!(of_child.len(), 1, "{of_child:?}");
    assert_eq!((of_child[0].usage, of_child[0].request), (0, 2 * MIB), "the child counts its own");
    assert_eq!(of_child[0].limit, format!("env GPUMEM_LIMIT of pid {child}"));
}

#[test]
fn an_unprivileged_user_binds_itself_and_no_one_else_in_its_cgroup() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("declared-user");
    let agent = Agent::start(&[]);
    let p = paths();
    let as_user = |uid: &str, env: &[(&str, &str)]| {
        let mut c = Command::new(&p.as_user);
        c.arg(uid)
            .arg(&p.workload)
            .arg("--libcuda")
            .arg(&p.libcuda)
            .args(["--scenario", "steps", "--size", &(3 * MIB).to_string(), "--iterations", "4"])
            .envs(env.iter().copied());
        Workload::from_command(c, Some(&cg))
    };
    let declaring = as_user("65534", &[("GPUMEM_LIMIT", "4MiB")]);
    let other = as_user("65533", &[]);
    let (pid, other_pid) = (declaring.pid(), other.pid());
    assert_eq!(reached(declaring), (vec!["step-1".to_string()], true), "bound by its own 4 MiB");
    assert_eq!(reached(other).0.last().map(String::as_str), Some("done"), "the other user's process is not");
    let lines = agent.wait_for_exit(other_pid);
    assert!(lines.decisions(other_pid, DecisionEvent::Limit).is_empty());
    // as-user execs the workload as the user: that exec declares.
    assert!(lines
        .decisions(pid, DecisionEvent::Limit)
        .iter()
        .all(|d| d.limit == format!("env GPUMEM_LIMIT of pid {pid}")));
}

/// `runs` starts of the C client whose first CUDA call after its exec is an
/// allocation above its declared limit, while another process makes the
/// agent read 10,000 records a second: refused or killed at that call
/// every time, never charged.
fn first_allocations_are_bound(runs: u32) {
    let cg = Cgroup::create("declared-race");
    let agent = Agent::start(&[]);
    let load = Workload::spawn(
        &["--scenario", "loop", "--iterations", "100000000", "--rate", "5000"],
        Some(&cg),
        &[],
    );
    let p = paths();
    let denies = register_write_refusal().is_none();
    let mut pids = Vec::new();
    for run in 0..runs {
        let out = Command::new(&p.first_alloc)
            .arg(&p.libcuda)
            .arg((2 * MIB).to_string())
            .env("GPUMEM_LIMIT", "1MiB,action=deny,fallback=signal:SIGKILL")
            .output()
            .expect("running first-alloc");
        let stdout = String::from_utf8_lossy(&out.stdout);
        match (denies, out.status.signal(), out.status.code()) {
            (false, Some(9), _) => assert!(stdout.is_empty(), "run {run}: {stdout}"),
            (true, None, Some(3)) => assert_eq!(stdout.trim(), r#"{"result":2}"#, "run {run}"),
            other => panic!("run {run}: the first allocation was not stopped: {other:?} {stdout}"),
        }
    }
    drop(load);
    let lines = agent.lines();
    let allocs = lines.all_events(RecordEvent::Alloc);
    pids.extend(
        lines
            .all_decisions()
            .iter()
            .filter(|d| d.limit.starts_with("env GPUMEM_LIMIT"))
            .map(|d| d.caller.pid),
    );
    assert!(allocs.iter().all(|a| !pids.contains(&a.caller.pid)), "no first allocation was charged");
}

#[test]
fn the_first_allocation_after_exec_is_bound_every_time() {
    if !privileged() {
        return;
    }
    // Under emulation (the kernel matrix) each run takes a quarter of a
    // second, 500 of them two minutes of each kernel's fifteen: 100 there.
    first_allocations_are_bound(if emulated() { 100 } else { 500 });
}
