//! The agent's refusals: clear errors for bad input and missing privileges,
//! and a clean start/stop cycle.
use std::{
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    process::Command,
};

use gpumem::{
    control::{Request, Response},
    output::{Scope, SplitLine},
};
use gpumem_tests::harness::*;

fn run_agent(args: &[&str]) -> (bool, String) {
    let out = Command::new(paths().agent).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn missing_libcuda_path_is_named_in_the_error() {
    if !privileged() {
        return;
    }
    let scratch = scratch();
    let sock = scratch.path().join("s.sock");
    let sock = sock.to_str().unwrap();
    let missing = ["run", "--libcuda", "/nonexistent/libcuda.so.1", "--socket", sock, "--duration", "1"];
    // Waited for, by default (a driver that comes later), and said so.
    let (ok, err) = run_agent(&missing);
    assert!(ok && err.contains("--libcuda /nonexistent/libcuda.so.1 not there yet"), "{err}");
    // Refused, as a service that must trace from its start wants.
    let (ok, err) = run_agent(&[&missing[..], &["--require-libcuda"]].concat());
    assert!(!ok);
    assert!(err.contains("--libcuda /nonexistent/libcuda.so.1") && err.contains("No such file"), "{err}");
}

#[test]
fn a_library_that_is_not_a_driver_is_refused_by_name() {
    if !privileged() {
        return;
    }
    let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a libc to point gpumem at");
    let scratch = scratch();
    let sock = scratch.path().join("s.sock");
    let (ok, err) =
        run_agent(&["run", "--libcuda", libc, "--socket", sock.to_str().unwrap(), "--duration", "1"]);
    assert!(!ok);
    assert!(err.contains("lacks required driver symbol(s) cuMemAlloc_v2, cuMemFree_v2"), "{err}");
}

#[test]
fn unprivileged_run_is_refused_naming_the_capabilities() {
    if !privileged() {
        return;
    }
    let Ok(out) = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(paths().agent)
        .args(["run", "--duration", "1"])
        .output()
    else {
        skip("setpriv (util-linux) is not installed");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("CAP_BPF and CAP_PERFMON"), "{err}");
}

#[test]
fn start_ready_and_clean_stop() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let s = agent.status();
    assert_eq!(s.libraries.len(), 1);
    // The simulated driver exports every symbol of libcuda's part of the
    // probe table; the memory queries' rows are attached where the kernel
    // lets the view program write user memory.
    let probes =
        gpumem::bpf::probes::probes().filter(|p| p.api.library == gpumem::bpf::probes::Library::Cuda);
    let view_rows = if user_write_refusal().is_some() { gpumem::bpf::probes::VIEW_RETURN } else { "" };
    let attached = format!("attached {} probe(s)", probes.filter(|p| p.ret != Some(view_rows)).count());
    assert!(agent.stderr().contains(&attached), "{}", agent.stderr());
    // NVML: used where an NVIDIA driver provides it, otherwise said once.
    if s.nvml {
        assert!(!s.devices.is_empty());
    } else {
        assert!(s.devices.is_empty());
        assert_eq!(agent.stderr().matches("NVML is not available").count(), 1, "{}", agent.stderr());
    }
    let socket = agent.socket.clone();
    let (status, _) = agent.stop();
    assert!(status.success());
    assert!(!socket.exists(), "the control socket is removed at exit");
}

/// A thread's nice value (`/proc/PID/stat`'s 19th field).
fn nice_of(pid: u32) -> i32 {
    stat_fields(pid)[16].parse().expect("a nice value")
}

#[test]
fn the_agent_runs_at_the_priority_boost_it_is_given() {
    if !privileged() {
        return;
    }
    // The agent starts at this process's nice value and lowers it to -N,
    // never raising it (a start at a lower one is kept).
    let own = nice_of(std::process::id());
    for (boost, expected) in [(None, own.min(-4)), (Some("0"), own), (Some("11"), own.min(-11))] {
        let extra: Vec<&str> = boost.map(|b| vec!["--priority-boost", b]).unwrap_or_default();
        let agent = Agent::start(&extra);
        assert_eq!(nice_of(agent.pid()), expected, "--priority-boost {boost:?}, started at nice {own}");
        let warned =
            agent.stderr().lines().any(|l| l.contains("warning") && l.contains("scheduling priority"));
        assert!(!warned, "root may raise it: {}", agent.stderr());
        let (status, _) = agent.stop();
        assert!(status.success());
    }
    let (ok, err) = run_agent(&["run", "--priority-boost", "21", "--duration", "1"]);
    assert!(!ok && err.contains("--priority-boost"), "{err}");
}

/// A pid no process has now (the highest free below `pid_max`).
fn a_dead_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    (2..max).rev().find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()).unwrap()
}

/// The pins in bpffs's root that agents' starts make for the maps they
/// create beside aya's loader (`gpumem-start-PID-NAME`, bpf/early_map.rs).
fn start_pins() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/sys/fs/bpf") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("gpumem-start-"))
        .collect()
}

fn bpffs_mounted() -> bool {
    std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
        m.lines().any(|l| l.split(' ').nth(1) == Some("/sys/fs/bpf") && l.split(' ').nth(2) == Some("bpf"))
    })
}

#[test]
fn a_start_leaves_no_pin_of_its_own_and_removes_one_a_dead_agent_left() {
    if !privileged() {
        return;
    }
    // Where bpffs is not mounted a start makes no pins (its maps are made
    // by aya's load): mounted here as hosts have it (and `--persist` mounts it).
    if !bpffs_mounted() {
        let out = std::process::Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]).output();
        assert!(out.as_ref().is_ok_and(|o| o.status.success()), "mounting bpffs: {out:?}");
    }
    // What an agent killed between its start's pins and aya's load leaves.
    let dead = a_dead_pid();
    let stale: Vec<String> =
        ["LIVE", "PROC_USAGE"].iter().map(|m| format!("/sys/fs/bpf/gpumem-start-{dead}-{m}")).collect();
    for path in &stale {
        let map = aya::maps::Array::<aya::maps::MapData, u32>::create(1, 0).expect("creating a map");
        map.pin(path).expect("pinning a map in bpffs");
    }
    let agent = Agent::start(&[]);
    for path in &stale {
        assert!(
            !std::path::Path::new(path).exists(),
            "a dead agent's start pin {path} is removed: {:?}",
            start_pins()
        );
    }
    let own = format!("gpumem-start-{}-", agent.pid());
    assert!(!start_pins().iter().any(|n| n.starts_with(&own)), "{:?}", start_pins());
    // Its maps are its programs' (the live table's and `LIVE`'s use is
    // the live_table tests'): what the workload holds, exactly.
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], None, &[]);
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    assert_process_holds(&agent.status(), w.pid(), c.held);
    w.run_to_end();
    let (status, _) = agent.stop();
    assert!(status.success());
}

#[test]
fn a_second_agent_on_one_socket_is_refused_before_it_attaches_anything() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let (status, err) = Agent::start_failing_on(&agent.socket, &[]);
    assert!(!status.success(), "{err}");
    let lock = format!("{}.lock", agent.socket.display());
    let named = format!("another gpumem agent (pid {} (gpumem)) holds {lock}", agent.pid());
    assert!(err.contains(&named) && err.contains("--socket PATH"), "{err}");
    // Refused before loading: nothing attached beside the first agent.
    assert!(!err.contains("attached"), "{err}");
    // The first agent still answers on its socket, and its stop takes the
    // lock file with it.
    assert_eq!(agent.status().libraries.len(), 1);
    let (status, _) = agent.stop();
    assert!(status.success());
    assert!(!std::path::Path::new(&lock).exists(), "{lock} left behind");
}

#[test]
fn periodic_usage_records_split_by_kind_and_device() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&["--interval", "0.2"]);
    let cg = Cgroup::create("interval");
    let mut w = Workload::spawn(&["--scenario", "basic", "--device", "1", "--pause"], Some(&cg), &[]);
    let pid = w.pid();
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    let fresh = agent.lines().len();
    let lines = agent.wait_for("usage records after the checkpoint", |l| {
        let new = l.get(fresh..).unwrap_or_default();
        new.usage(Scope::Process).iter().any(|u| u.entry.pid == Some(pid))
            && new.usage(Scope::Cgroup).iter().any(|u| u.entry.cgroup_id == cg.id)
    });
    let new = &lines[fresh..];
    let p = &new.usage(Scope::Process).into_iter().find(|u| u.entry.pid == Some(pid)).unwrap().entry;
    assert_eq!((p.bytes, p.kernel_bytes), (c.held, c.held));
    assert_eq!(p.split, [SplitLine { kind: "device".into(), device: Some(1), bytes: c.held }]);
    assert!(p.cmdline.as_deref().unwrap().contains("--scenario basic"));
    let g = &new.usage(Scope::Cgroup).into_iter().find(|u| u.entry.cgroup_id == cg.id).unwrap().entry;
    assert_eq!(g.bytes, c.held);
    w.run_to_end();
}

#[test]
fn the_control_socket_answers_what_it_cannot_read_with_an_error_and_goes_on() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let mut conn = UnixStream::connect(&agent.socket).expect("connecting to the control socket");
    let mut answers = BufReader::new(conn.try_clone().unwrap()).lines();
    for garbage in ["status", "{\"request\":\"explode\"}", "{", "\u{1f}\u{7f}"] {
        writeln!(conn, "{garbage}").unwrap();
        let answer = answers.next().expect("an answer").unwrap();
        let Response::Error(why) = serde_json::from_str(&answer).unwrap() else {
            panic!("`{garbage}` answered {answer}");
        };
        assert!(why.contains("not a request"), "{why}");
    }
    // The same connection still takes a real request, and the agent serves others.
    writeln!(conn, "{}", serde_json::to_string(&Request::LimitList).unwrap()).unwrap();
    let answer = answers.next().expect("an answer").unwrap();
    assert_eq!(serde_json::from_str::<Response>(&answer).unwrap(), Response::Limits(vec![]));
    assert!(agent.status().libraries.len() == 1);
}
