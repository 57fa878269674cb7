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
