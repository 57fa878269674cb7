//! A real container runtime: podman runs two workload containers from root
//! filesystem directories, one with its own copy of the simulated libcuda
//! in its image, one with the host's bind-mounted. gpumem attaches to the
//! container's copy when it is mapped, names each container (runtime and
//! id from the real cgroup path podman made), and a limit on one
//! container's cgroup stops that container and no other.
use gpumem::output::RecordEvent;
use gpumem_tests::{harness::*, truth::Checkpoint};
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;

/// `steps` of 3 MiB, five times, holding at the start until resumed.
const STEPS: [&str; 7] = ["--scenario", "steps", "--size", "3145728", "--iterations", "5", "--hold-at-start"];

#[test]
fn each_container_is_named_and_a_per_container_limit_stops_only_its_own() {
    if !privileged() {
        return;
    }
    let Some(podman) = Podman::available() else { return };
    let agent = Agent::start(&[]);
    let tag = std::process::id();
    let (own_name, bound_name) = (format!("gpumem-own-{tag}"), format!("gpumem-bound-{tag}"));
    let (mut own, own_container) = podman.run(&own_name, &podman.rootfs("own", true), false, &STEPS);
    let (mut bound, bound_container) = podman.run(&bound_name, &podman.rootfs("bound", false), true, &STEPS);
    for w in [&mut own, &mut bound] {
        assert_eq!(w.checkpoint().checkpoint, "loaded");
    }
    let (own_pid, own_id) = own_container.host_pid_and_id();
    let (bound_pid, bound_id) = bound_container.host_pid_and_id();
    // The image's own copy is another file: the agent attaches to it
    // through the container's root; the bound one is the host's file.
    let copy = format!("/proc/{own_pid}/root/usr/lib/libcuda.so.1");
    wait_until("the agent to attach to the container's own libcuda", || {
        agent.stderr().lines().any(|l| l.starts_with("gpumem: attached") && l.contains(&copy))
    });
    let own_cgroup = format!("/libpod_parent/libpod-{own_id}");
    let (ok, _, err) = agent.limit(&["set", &format!("cgroup:{own_cgroup}=10MiB")]);
    assert!(ok, "{err}");
    for w in [&mut own, &mut bound] {
        w.resume();
    }
    let (own_seen, own_status) = own.until_exit();
    let (bound_seen, bound_status) = bound.until_exit();
    // 3 + 3 + 3 fit in 10 MiB; the fourth would not: podman reports the
    // kill as its own exit status 137.
    let steps = |seen: &[Checkpoint]| seen.iter().map(|c| c.checkpoint.clone()).collect::<Vec<_>>();
    assert_eq!(steps(&own_seen), ["step-1", "step-2", "step-3"]);
    assert_eq!(own_status.code(), Some(128 + Signal::SIGKILL as i32), "{own_status:?}");
    assert_eq!(steps(&bound_seen).last().map(String::as_str), Some("done"), "{bound_status:?}");
    assert!(bound_status.success(), "{bound_status:?}");
    let lines = agent.wait_for("both exit records", |l| {
        l.count(own_pid, RecordEvent::Exit) == 1 && l.count(bound_pid, RecordEvent::Exit) == 1
    });
    for (pid, id, allocs) in [(own_pid, &own_id, 3), (bound_pid, &bound_id, 5)] {
        let records = lines.events(pid, RecordEvent::Alloc);
        assert_eq!(records.len(), allocs, "pid {pid}");
        for r in records {
            let c = r.container.as_ref().unwrap_or_else(|| panic!("no container in {r:?}"));
            assert_eq!((c.runtime.as_str(), c.id.as_str()), ("podman", id.as_str()));
            assert_eq!(r.caller.cgroup.as_deref(), Some(format!("/libpod_parent/libpod-{id}").as_str()));
        }
        assert_eq!(lines.events(pid, RecordEvent::Exit)[0].size, allocs as u64 * 3 * MIB);
    }
    let limits = lines.all_decisions();
    assert_eq!(limits.len(), 1, "only the limited container crossed: {limits:?}");
    assert_eq!(
        (limits[0].caller.pid, limits[0].limit.as_str()),
        (own_pid, format!("cgroup:{own_cgroup}").as_str())
    );
    assert_eq!((limits[0].usage, limits[0].request), (9 * MIB, 3 * MIB));
    assert_eq!(agent.status().libraries.len(), 2, "the host's file and the image's copy");
}

/// `steps` of `size` bytes `n` times on `device`, pausing at each.
fn steps(size: u64, n: u32, device: u32) -> Vec<String> {
    let args = ["--scenario", "steps", "--size", &size.to_string(), "--iterations", &n.to_string()];
    args.iter()
        .map(|s| s.to_string())
        .chain(["--device".into(), device.to_string(), "--pause".into()])
        .collect()
}

/// The checkpoints a paused workload reaches until it exits, and its
/// exit code (podman's: 137 for a kill).
fn run(w: Workload) -> (Vec<String>, Option<i32>) {
    let (seen, status) = w.resumed_to_exit();
    (seen, status.code())
}

/// A container of `env` whose main process holds `held` on device 0
/// (16 MiB steps, paused); its cgroup's path, once the agent has made the
/// container's rules.
fn declaring_container(
    podman: &Podman,
    agent: &Agent,
    name: &str,
    env: &[(&str, &str)],
    held: u32,
) -> (Workload, Container, String) {
    let args = steps(16 * MIB, 8, 0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut main, container) = podman.run_with(name, &podman.rootfs(name, false), (true, env), &args);
    for i in 1..=held {
        assert_eq!(main.checkpoint().checkpoint, format!("step-{i}"));
        if i < held {
            main.resume();
        }
    }
    let (_, id) = container.host_pid_and_id();
    let path = format!("/libpod_parent/libpod-{id}");
    let target = format!("cgroup:{path}");
    agent.wait_for_state(
        "the container's rules",
        || agent.limits().into_iter().filter(|l| l.target == target).count(),
        |&n| n > 0,
    );
    (main, container, path)
}

#[test]
fn a_container_started_with_gpumem_limit_binds_what_podman_exec_runs_in_it() {
    if !privileged() {
        return;
    }
    let Some(podman) = Podman::available() else { return };
    let agent = Agent::start(&[]);
    let name = format!("gpumem-declared-{}", std::process::id());
    let env = [("GPUMEM_LIMIT", "64MiB,action=signal:SIGKILL")];
    let (main, container, path) = declaring_container(&podman, &agent, &name, &env, 3);
    // Without the variable: 48 + 8 + 8 fit in the container's 64 MiB,
    // the third call would cross it.
    let args = steps(8 * MIB, 3, 0);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (seen, code) = run(container.exec(&[], &args));
    assert_eq!((seen.as_slice(), code), (&["step-1".to_string(), "step-2".into()][..], Some(137)));
    let lines = agent.wait_for("the exec'd process's decision", |l| {
        l.all_decisions().iter().any(|d| d.limit == format!("cgroup:{path}"))
    });
    let d = lines.all_decisions().into_iter().find(|d| d.limit == format!("cgroup:{path}")).unwrap();
    assert_eq!((d.usage, d.request, d.action.as_str()), (64 * MIB, 8 * MIB, "signal:9"));
    assert!(d.source.as_deref().is_some_and(|s| s.starts_with("env GPUMEM_LIMIT of pid")), "{d:?}");
    // Its 16 MiB went with it: the main process's fourth step fits, its
    // fifth would cross 64 MiB (its own declaration and the container's).
    let (seen, code) = run(main);
    assert_eq!((seen.as_slice(), code), (&["step-4".to_string()][..], Some(137)));
    drop(container);
    agent.wait_for_state(
        "the container's rules to go with it",
        || agent.limits().into_iter().filter(|l| l.target == format!("cgroup:{path}")).count(),
        |&n| n == 0,
    );
}

#[test]
fn hami_variables_limit_each_device_of_a_container() {
    if !privileged() {
        return;
    }
    let Some(podman) = Podman::available() else { return };
    let agent = Agent::start(&[]);
    let exec = |c: &Container, size: u64, n: u32, device: u32| {
        let args = steps(size, n, device);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(c.exec(&[], &args))
    };
    let tag = std::process::id();
    // Every device 64 MiB on its own: 48 held on device 0.
    let env = [("CUDA_DEVICE_MEMORY_LIMIT", "64m")];
    let (main, c, _) = declaring_container(&podman, &agent, &format!("gpumem-hami-{tag}"), &env, 3);
    let killed = |n: usize| ((1..=n).map(|i| format!("step-{i}")).collect::<Vec<_>>(), Some(137));
    assert_eq!(exec(&c, 24 * MIB, 3, 1), killed(2), "device 1 counts on its own: 24 + 24, then 72 > 64");
    assert_eq!(exec(&c, 8 * MIB, 3, 0), killed(2), "device 0: 48 + 8 + 8, then 72 > 64");
    drop((main, c));
    // Device 1 only, 32 MiB: device 0 is not limited.
    let env = [("CUDA_DEVICE_MEMORY_LIMIT_1", "32m")];
    let (main, c, _) = declaring_container(&podman, &agent, &format!("gpumem-hami1-{tag}"), &env, 1);
    assert_eq!(exec(&c, 24 * MIB, 3, 0).0.last().map(String::as_str), Some("done"));
    assert_eq!(exec(&c, 16 * MIB, 3, 1), killed(2), "16 + 16, then 48 > 32");
    drop((main, c));
}
