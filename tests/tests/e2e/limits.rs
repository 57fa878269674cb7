//! Limits decided in the kernel at the allocation, on every kernel they run
//! on (this host's and the matrix's under QEMU): signal stops the caller at
//! exactly the first allocation that would cross, uncharged; audit only
//! records; racing processes under one cgroup limit never pass it
//! together; deny makes the call return CUDA_ERROR_OUT_OF_MEMORY where the
//! kernel lets uprobe programs write registers, and is refused (or falls
//! back) where it does not.
use std::os::unix::process::ExitStatusExt;

use gpumem::output::{DecisionEvent, RecordEvent};
use gpumem_tests::{
    harness::*,
    no_device::{Made, ROUND_APIS},
};
use nix::sys::signal::Signal;
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn steps(cg: &Cgroup, size: u64, n: u32) -> Workload {
    let (size, n) = (size.to_string(), n.to_string());
    Workload::spawn(&["--scenario", "steps", "--size", &size, "--iterations", &n], Some(cg), &[])
}

#[test]
fn signal_stops_the_caller_at_the_first_crossing_and_charges_nothing_of_it() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-signal");
    let agent = Agent::start(&["--limit", &format!("cgroup:{}=10MiB", cg.path)]);
    assert!(agent.stderr().contains("action signal:9"), "{}", agent.stderr());
    let w = steps(&cg, 3 * MIB, 5);
    let pid = w.pid();
    let (seen, status) = w.until_exit();
    // 3 + 3 + 3 fit in 10 MiB; the fourth would not.
    let names: Vec<&str> = seen.iter().map(|c| c.checkpoint.as_str()).collect();
    assert_eq!(names, ["step-1", "step-2", "step-3"]);
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");
    let lines = agent.wait_for_exit(pid);
    let limits = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!(limits.len(), 1, "{limits:?}");
    let l = limits[0];
    assert_eq!(l.limit, format!("cgroup:{}", cg.path));
    assert_eq!((l.usage, l.request), (9 * MIB, 3 * MIB));
    assert_eq!((l.limit_bytes, l.action.as_str()), (10 * MIB, "signal:9"));
    assert_eq!(lines.count(pid, RecordEvent::Alloc), 3, "the refused call was not charged");
    assert_eq!(lines.events(pid, RecordEvent::Exit)[0].size, 9 * MIB);
    assert_cgroup_holds(&agent.status(), &cg, 0);
}

#[test]
fn audit_records_every_crossing_and_changes_nothing() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-audit");
    let agent = Agent::start(&["--limit", &format!("cgroup:{}=10MiB,soft=5MiB,action=audit", cg.path)]);
    let w = steps(&cg, 3 * MIB, 5);
    let pid = w.pid();
    let (seen, status) = w.until_exit();
    assert!(status.success(), "{status:?}");
    assert_eq!(seen.last().unwrap().checkpoint, "done");
    let lines = agent.wait_for_exit(pid);
    let limits = lines.decisions(pid, DecisionEvent::Limit);
    let usages: Vec<u64> = limits.iter().map(|l| l.usage).collect();
    assert_eq!(usages, [9 * MIB, 12 * MIB], "the 4th and 5th calls crossed 10 MiB");
    assert!(limits.iter().all(|l| l.action == "audit"));
    let soft = lines.decisions(pid, DecisionEvent::LimitSoft);
    assert_eq!(soft.len(), 1, "one record per crossing of the soft limit");
    assert_eq!((soft[0].usage, soft[0].limit_bytes), (3 * MIB, 5 * MIB));
    assert_eq!(lines.count(pid, RecordEvent::Alloc), 5);
}

#[test]
fn racing_processes_under_one_cgroup_limit_never_pass_it_together() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-race");
    let limit = 24 * MIB;
    let agent = Agent::start(&["--limit", &format!("cgroup:{}={limit}", cg.path)]);
    let ws: Vec<Workload> = (0..3)
        .map(|seed| {
            let seed = (seed + 21).to_string();
            let args = ["--scenario", "threads", "--threads", "4", "--iterations", "300", "--seed", &seed];
            Workload::spawn(&args, Some(&cg), &[])
        })
        .collect();
    let pids: Vec<u32> = ws.iter().map(Workload::pid).collect();
    let killed = ws
        .into_iter()
        .map(|w| w.until_exit().1)
        .filter(|s| s.signal() == Some(Signal::SIGKILL as i32))
        .count();
    // A process killed at its first call never held anything: it has no
    // exit record, only its limit record (after any of its allocations in
    // the stream).
    let lines = agent.wait_for("every exit record", |l| {
        pids.iter().all(|&p| {
            l.count(p, RecordEvent::Exit) >= 1
                || (!l.decisions(p, DecisionEvent::Limit).is_empty() && l.count(p, RecordEvent::Alloc) == 0)
        })
    });
    assert!(killed > 0, "the workloads ask for far more than {limit} bytes together");
    let peak = lines
        .all_events(RecordEvent::Alloc)
        .iter()
        .filter(|l| l.caller.cgroup_id == cg.id)
        .map(|l| l.cgroup_total)
        .max()
        .unwrap();
    assert!(peak <= limit, "cgroup usage reached {peak} > limit {limit}");
    assert!(lines.all_decisions().iter().any(|l| l.caller.cgroup_id == cg.id));
    // A thread killed on its way back from the driver may charge after its
    // leader's exit record: the released entry takes it back at once, and
    // the agent counts its record as late.
    agent.wait_for_status("the cgroup to hold nothing", |s| {
        cgroup_entry(s, cg.id).is_none_or(|e| e.bytes == 0 && e.kernel_bytes == 0)
    });
    assert_cgroup_holds(&agent.status(), &cg, 0);
    // Calls in flight when their threads were killed never return: their
    // reservations are given back at the threads' exits.
    let target = format!("cgroup:{}", cg.path);
    agent.wait_for_state(
        "the limit's usage to fall back to 0",
        || agent.limits(),
        |l| rule(l, &target).unwrap().usage == 0,
    );
}

/// Whether `deny` can run here: root, and a kernel that lets uprobe
/// programs write registers; otherwise says why the test is skipped.
fn deny_runs_here() -> bool {
    if !privileged() {
        return false;
    }
    if let Some(why) = register_write_refusal() {
        skip(&format!(
            "this kernel does not let uprobe programs write registers ({why}); `cargo xtask test` runs it on \
             the matrix kernels that do"
        ));
        return false;
    }
    true
}

#[test]
fn deny_returns_out_of_memory_and_the_process_goes_on() {
    if !deny_runs_here() {
        return;
    }
    // Through the links the agent makes by default (multi-uprobe links
    // where the kernel has them) and through single links.
    deny_round(&[]);
    if multi_link_refusal().is_none() {
        deny_round(&["--uprobe-links", "single"]);
    }
}

fn deny_round(links: &[&str]) {
    let cg = Cgroup::create("limit-deny-regs");
    let limit = 10 * MIB;
    let spec = format!("cgroup:{}={limit},action=deny", cg.path);
    let agent = Agent::start(&[&["--limit", spec.as_str()], links].concat());
    assert!(agent.stderr().contains("action deny"), "{}", agent.stderr());
    let size = (4 * MIB).to_string();
    let mut w = Workload::spawn(
        &["--scenario", "deny", "--size", &size, "--iterations", "10", "--pause"],
        Some(&cg),
        &[],
    );
    let pid = w.pid();
    let mut names = Vec::new();
    loop {
        let c = w.checkpoint();
        agent.wait_for_checkpoint(&c);
        let status = agent.status();
        assert_process_holds(&status, pid, c.held);
        assert_cgroup_holds(&status, &cg, c.held);
        assert!(c.held <= limit, "{} holds {} > {limit}", c.checkpoint, c.held);
        names.push(c.checkpoint.clone());
        w.resume();
        if c.checkpoint == "again" {
            break;
        }
    }
    assert_eq!(names, ["step-1", "step-2", "refused", "freed", "again"]);
    w.finish();
    let lines = agent.wait_for_exit(pid);
    let limits = lines.decisions(pid, DecisionEvent::Limit);
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!((limits[0].usage, limits[0].request, limits[0].action.as_str()), (8 * MIB, 4 * MIB, "deny"));
    let failed = lines.events(pid, RecordEvent::AllocFailed);
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].result, failed[0].proc_total), (Some(2), 8 * MIB));
    // gpumem refused it, not the driver: the limit record names who held
    // what the limit counts; the refusal names no device's holders.
    assert_eq!(limits[0].holders.as_ref().map(|h| h.total), Some(8 * MIB));
    assert!(failed[0].holders.is_none(), "{:?}", failed[0]);
    assert_eq!(lines.count(pid, RecordEvent::Alloc), 3, "two before the refusal, one after the free");
    assert_cgroup_holds(&agent.status(), &cg, 0);
}

#[test]
fn deny_is_refused_without_register_writes_and_its_fallback_applies() {
    if !privileged() {
        return;
    }
    if register_write_refusal().is_none() {
        skip(
            "this kernel lets uprobe programs write registers, so deny is not refused here; `cargo xtask test` \
             runs it on the host and the matrix kernels that do not",
        );
        return;
    }
    let cg = Cgroup::create("limit-deny");
    let out = std::process::Command::new(paths().agent)
        .args(["run", "--libcuda"])
        .arg(paths().libcuda)
        .args(["--duration", "1", "--socket", "/tmp/gpumem-deny-test.sock", "--limit"])
        .arg(format!("cgroup:{}=10MiB,action=deny", cg.path))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("fallback=signal:SIGTERM"), "{err}");
    let agent =
        Agent::start(&["--limit", &format!("cgroup:{}=10MiB,action=deny,fallback=signal:SIGTERM", cg.path)]);
    let (seen, status) = steps(&cg, 4 * MIB, 5).until_exit();
    assert_eq!(seen.len(), 2, "4 + 4 fit, the third is refused");
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status:?}");
    drop(agent);
}

#[test]
fn unknown_cgroup_in_a_limit_is_refused_by_name() {
    if !privileged() {
        return;
    }
    let out = std::process::Command::new(paths().agent)
        .args(["run", "--libcuda"])
        .arg(paths().libcuda)
        .args(["--duration", "1", "--limit", "cgroup:/no/such/cgroup=1GiB"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no cgroup /no/such/cgroup"), "{err}");
}

#[test]
fn probe_reports_each_capability_with_a_reason() {
    if !privileged() {
        return;
    }
    let out = std::process::Command::new(paths().agent).args(["probe", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let caps = v["capabilities"].as_array().unwrap();
    let get =
        |name: &str| caps.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name}: {v}"));
    for name in ["privileges", "uprobes", "cgroup_v2", "ring_buffer", "signal_from_bpf"] {
        assert_eq!(get(name)["available"], true, "{}", get(name));
    }
    let writes = get("uprobe_register_writes");
    assert!(writes["available"].is_boolean() && !writes["reason"].as_str().unwrap().is_empty());
    if writes["available"] == false {
        assert!(writes["reason"].as_str().unwrap().contains("deny"), "{writes}");
    }
}

#[test]
fn pid_and_comm_limits_apply_to_their_processes_only() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-targets");
    // A process that exists before the agent: limited by pid.
    let held = {
        let args = ["--scenario", "steps", "--size", "4194304", "--iterations", "4", "--hold-at-start"];
        Workload::spawn(&args, Some(&cg), &[])
    };
    let pid = held.pid();
    let mut held = held;
    assert_eq!(held.checkpoint().checkpoint, "loaded");
    let agent = Agent::start(&[
        "--limit",
        &format!("pid:{pid}=10MiB,action=audit"),
        "--limit",
        "comm:not-this-one=1MiB",
    ]);
    held.resume();
    let (seen, status) = held.until_exit();
    assert!(status.success() && seen.last().unwrap().checkpoint == "done", "{status:?} {seen:?}");
    let lines = agent.wait_for_exit(pid);
    let limits = lines.decisions(pid, DecisionEvent::Limit);
    let usages: Vec<u64> = limits.iter().map(|l| l.usage).collect();
    assert_eq!(usages, [8 * MIB, 12 * MIB], "the third and fourth 4 MiB calls cross 10 MiB");
    assert!(limits.iter().all(|l| l.limit == format!("pid:{pid}")));
    drop(agent);

    // By comm: every gpumem-workload process, here with SIGKILL.
    let agent = Agent::start(&["--limit", "comm:gpumem-workload=6MiB"]);
    let (seen, status) = steps(&cg, 4 * MIB, 3).until_exit();
    assert_eq!(seen.len(), 1, "4 MiB fits, 8 MiB does not");
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
    let lines = agent.wait_for("a limit record", |l| !l.all_decisions().is_empty());
    assert_eq!(lines.all_decisions()[0].limit, "comm:gpumem-workload");
}

#[test]
fn bpf_log_says_each_limit_decision_from_the_kernel() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("limit-log");
    let agent =
        Agent::start(&["--bpf-log", "--limit", &format!("cgroup:{}=10MiB,soft=5MiB,action=audit", cg.path)]);
    let w = steps(&cg, 3 * MIB, 5);
    let pid = w.pid();
    let (_, status) = w.until_exit();
    assert!(status.success(), "{status:?}");
    let lines = agent.wait_for_exit(pid);
    // One log line per decision record, with the same numbers, said by
    // the program that made the decision.
    let mut expected: Vec<String> = lines
        .decisions(pid, DecisionEvent::Limit)
        .iter()
        .chain(lines.decisions(pid, DecisionEvent::LimitSoft).iter())
        .map(|d| {
            let kind = if d.caller.event == DecisionEvent::Limit { "hard" } else { "soft" };
            format!("bytes asked with {} counted cross {} ({kind})", d.usage, d.limit_bytes)
        })
        .collect();
    assert_eq!(expected.len(), 3, "two hard crossings and one soft");
    expected.sort();
    let said = || {
        let mut said: Vec<String> = agent
            .stderr()
            .lines()
            .filter_map(|l| l.strip_prefix("gpumem: bpf: limit slot 0: 3145728 "))
            .map(|l| l.split(": action").next().unwrap_or(l).to_string())
            .collect();
        said.sort();
        said
    };
    agent.wait_for_state("the kernel's log of the decisions", said, |s| *s == expected);
}

/// `deny` on NVIDIA's own driver library (the newest series, from Debian's non-free
/// packages; the matrix carries it into its VMs): with no GPU its
/// allocations return CUDA_ERROR_NOT_INITIALIZED (3); a call that would
/// cross a limit returns CUDA_ERROR_OUT_OF_MEMORY (2) instead, without
/// entering the driver, through dlsym and cuGetProcAddress_v2 alike, and
/// the process goes on.
#[test]
fn deny_makes_nvidias_own_allocations_return_out_of_memory() {
    if !deny_runs_here() {
        return;
    }
    let Some(list) = provided("GPUMEM_NVIDIA_LIBCUDA", "fetches NVIDIA's libcuda1 and sets it") else {
        return;
    };
    for lib in std::env::split_paths(&list) {
        let lib = lib.to_str().unwrap();
        let cg = Cgroup::create("limit-deny-nvidia");
        let agent =
            Agent::start(&["--libcuda", lib, "--limit", &format!("cgroup:{}=1MiB,action=deny", cg.path)]);
        let size = (2 * MIB).to_string();
        let args = ["--libcuda", lib, "--scenario", "no-device", "--iterations", "2", "--size", &size];
        let mut w = Workload::spawn(&args, Some(&cg), &[]);
        let pid = w.pid();
        let made: Made = w.line();
        assert_eq!(made.init, 100, "{lib}: no device");
        let results: Vec<i32> = made.calls.iter().map(|c| c.result).collect();
        assert_eq!(results, vec![2; ROUND_APIS.len() * 2], "{lib}: every call denied: {made:?}");
        let c = w.checkpoint();
        assert_eq!(c.checkpoint, "refused", "the process went on past its denied calls");
        let lines = agent.wait_for_checkpoint(&c);
        let denied = lines.decisions(pid, DecisionEvent::Limit);
        assert_eq!(denied.len(), made.calls.len(), "{lib}: {denied:?}");
        assert!(denied.iter().all(|d| d.action == "deny" && d.request == 2 * MIB), "{denied:?}");
        let failed: Vec<(&str, Option<u32>)> = lines
            .events(pid, RecordEvent::AllocFailed)
            .iter()
            .map(|l| (l.caller.api.as_ref(), l.result))
            .collect();
        let truth: Vec<(&str, Option<u32>)> = made.calls.iter().map(|c| (c.api.as_str(), Some(2))).collect();
        assert_eq!(failed, truth, "{lib}: each denied call's return recorded, in order");
        w.finish();
    }
}
