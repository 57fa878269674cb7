//! The agent's own image (`cargo xtask image`) run by podman exactly as
//! deploy/kubernetes/30-daemonset.yaml specifies: its command and
//! arguments, environment, security context (the three capabilities, a
//! read-only root, the host's PIDs) and mounts, read from the manifest.
//! The node-specific parts stand in as a kubelet would make them: the
//! ConfigMap's file, the socket directory, the node's driver directory
//! (the simulated driver). Checked from outside the container, as a
//! node's root would.
use std::{os::unix::process::ExitStatusExt, path::PathBuf};

use gpumem_tests::harness::*;

/// The manifest's pin directory (`--persist`), on the node's BPF file
/// system.
pub(crate) const PINS: &str = "/sys/fs/bpf/gpumem";

/// Removes what the agents pinned, whatever the test's end.
pub(crate) struct Detach;

impl Detach {
    /// None (the test skipped, saying why) where the node has pins
    /// already: another agent's. The node's bpf file system is mounted
    /// first where it is not, as systemd mounts it on every node at boot:
    /// the pod's agent, without CAP_SYS_ADMIN, cannot mount it itself
    /// (and says so: "/sys/fs/bpf is not on a bpf filesystem").
    pub(crate) fn guard() -> Option<Self> {
        node_bpffs();
        if std::path::Path::new(PINS).exists() {
            skip(&format!("{PINS} holds pins on this host (another agent's?)"));
            return None;
        }
        Some(Self)
    }
}

/// Mounts bpffs at /sys/fs/bpf where nothing is mounted there (left
/// mounted: as on a node).
fn node_bpffs() {
    use nix::sys::statfs::{statfs, BPF_FS_MAGIC};
    let dir = std::path::Path::new("/sys/fs/bpf");
    if statfs(dir).is_ok_and(|s| s.filesystem_type() == BPF_FS_MAGIC) {
        return;
    }
    nix::mount::mount(Some("bpf"), dir, Some("bpf"), nix::mount::MsFlags::empty(), Some("mode=0700"))
        .unwrap_or_else(|e| panic!("mounting bpffs at {}, as a node has it: {e}", dir.display()));
}

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = std::process::Command::new(paths().agent).args(["detach", "--pin-dir", PINS]).output();
    }
}

/// A directory a hostPath mount needs on this host, made if missing and
/// removed again when dropped.
struct HostDir(Option<PathBuf>);

impl HostDir {
    fn ensure(path: &str) -> Self {
        let p = PathBuf::from(path);
        match p.exists() {
            true => Self(None),
            false => {
                std::fs::create_dir_all(&p).unwrap();
                Self(Some(p))
            }
        }
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// The node as the kubelet would have made it for the agent's pod: the
/// ConfigMap's file (with a rule of the test's on `cgroup`), the socket
/// directory, the node's driver directory (the simulated driver), the
/// kubelet's log directories.
pub(crate) struct Node {
    _scratch: tempfile::TempDir,
    pub config: PathBuf,
    run: PathBuf,
    pub driver: PathBuf,
    _kubelet: [HostDir; 2],
}

impl Node {
    pub(crate) fn make(ds: &DaemonSet, cgroup: &str) -> Self {
        let scratch = scratch();
        let dir = |d: &str| {
            let p = scratch.path().join(d);
            std::fs::create_dir_all(&p).unwrap();
            p
        };
        let (config, run, driver) = (dir("config"), dir("run"), dir("driver"));
        let rule =
            format!("\n[[limit]]\ncgroup = \"{cgroup}\"\nhard = \"24MiB\"\naction = \"signal:SIGKILL\"\n");
        std::fs::write(config.join("gpumem.toml"), ds.config.clone() + &rule).unwrap();
        std::fs::copy(paths().libcuda, driver.join("libcuda.so.1")).unwrap();
        let _kubelet = [HostDir::ensure("/var/log/pods"), HostDir::ensure("/var/log/containers")];
        Self { _scratch: scratch, config, run, driver, _kubelet }
    }

    /// Each mount's directory on this host.
    pub(crate) fn host(&self, m: &Mount) -> PathBuf {
        match m.name.as_str() {
            "config" => self.config.clone(),
            "run" => self.run.clone(),
            "driver-libs" => self.driver.clone(),
            _ => PathBuf::from(m.host_path.clone().unwrap_or_else(|| panic!("mount {m:?}"))),
        }
    }
}

/// `gpumem top` on the node, in a real terminal, through the socket on
/// the pod's mounted directory: the process `pid` in its rows.
fn top_on_the_node_shows(agent: &AgentContainer, pid: u32) {
    let Some(tmux) = Tmux::available() else { return };
    let socket = agent.socket.to_str().unwrap();
    tmux.start(80, 24, &[paths().agent.to_str().unwrap(), "top", "--socket", socket]);
    let start = format!("{pid} gpumem-workload ");
    tmux.wait_for_screen("the node's process in top", |s| {
        s.lines().any(|l| l.trim_start_matches(['>', ' ']).starts_with(&start))
    });
    tmux.keys(&["q"]);
    wait_until("top to quit on q", || !tmux.running());
}

/// Processes in two other containers, each on its own copy of the
/// driver: found through their roots, traced exactly and named.
fn containers_processes_are_traced_and_named(podman: &Podman, agent: &AgentContainer, name: &str) {
    let args = ["--scenario", "basic", "--pause", "--hold-at-start"];
    let mut running: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| {
            let rootfs = podman.rootfs(&format!("daemonset-workload-{n}"), true);
            let (mut cw, ctr) = podman.run(&format!("{name}-{n}"), &rootfs, false, &args);
            assert_eq!(cw.checkpoint().checkpoint, "loaded");
            (cw, ctr)
        })
        .collect();
    agent.wait_for_status("both containers' copies attached", |s| s.libraries.len() >= 3);
    for (cw, ctr) in &mut running {
        cw.resume();
        let c = cw.checkpoint();
        let (host_pid, id) = ctr.host_pid_and_id();
        let s = agent.wait_for_status("the container's process", |s| {
            proc_entry(s, host_pid).is_some_and(|p| p.bytes == c.held)
        });
        let entry = proc_entry(&s, host_pid).unwrap();
        assert_eq!(entry.container.as_ref().map(|c| c.id.as_str()), Some(id.as_str()), "{entry:?}");
    }
}

#[test]
fn the_image_runs_as_the_daemonset_specifies_and_traces_and_limits_the_node() {
    if !privileged() {
        return;
    }
    let Some(podman) = Podman::available() else { return };
    let Some(image) = podman.agent_image() else { return };
    let ds = DaemonSet::read();
    let Some(_detach) = Detach::guard() else { return };
    let cg = Cgroup::create("daemonset-limited");
    let node = Node::make(&ds, &cg.path);
    let name = format!("gpumem-daemonset-{}", std::process::id());
    // The pod's network stands in as the host's (no CNI here), so that
    // Prometheus and the probes reach its port as they would its IP.
    let agent = podman.run_agent(&name, (&ds, "host"), &image, |m| node.host(m));
    for (path, port) in &ds.probes {
        let answer = http::get(([127, 0, 0, 1], *port).into(), path).expect("the probe's request");
        assert_eq!(answer.status, 200, "the probe {path} on {port}");
    }
    agent.wait_for_status("the node's driver attached", |s| s.libcuda_attached);

    // A process on the node, on the node's driver: in the agent's status
    // and, scraped by a real Prometheus, in its metrics.
    let lib = node.driver.join("libcuda.so.1");
    let lib = lib.to_str().unwrap();
    let mut w = Workload::spawn(&["--libcuda", lib, "--scenario", "basic", "--pause"], None, &[]);
    let (pid, c) = (w.pid(), w.checkpoint());
    let s = agent.wait_for_status("its memory", |s| proc_entry(s, pid).is_some_and(|p| p.bytes == c.held));
    assert_process_holds(&s, pid, c.held);
    if let Some(prom) = Prometheus::scraping(([127, 0, 0, 1], ds.probes[0].1).into()) {
        prom.wait_for("gpumem_libcuda_attached", |r| r.len() == 1 && r[0].1 == 1.0);
        let held = format!("sum(gpumem_process_memory_bytes{{pid=\"{pid}\"}})");
        prom.wait_for(&held, |r| r.len() == 1 && r[0].1 as u64 == c.held);
    }
    top_on_the_node_shows(&agent, pid);
    w.run_to_end();

    containers_processes_are_traced_and_named(&podman, &agent, &format!("{name}-workload"));

    // The ConfigMap's limit: a process of its cgroup is stopped at the
    // call that crosses 24 MiB.
    let steps =
        ["--libcuda", lib, "--scenario", "steps", "--size", "16777216", "--iterations", "2", "--pause"];
    let (seen, status) = Workload::spawn(&steps, Some(&cg), &[]).resumed_to_exit();
    assert_eq!((seen, status.signal()), (vec!["step-1".to_string()], Some(9)), "16 MiB fit, 32 cross 24");
    let (ok, listed) = agent.limit(&["list"]);
    assert!(ok && listed.contains(&cg.path), "{listed}");

    // The ConfigMap changes, and the manifest's reload command (run in the
    // pod, as `kubectl exec` would) makes the agent reread it.
    let second = Cgroup::create("daemonset-reloaded");
    let rule = format!("\n[[limit]]\ncgroup = \"{}\"\nhard = \"8MiB\"\n", second.path);
    let file = node.config.join("gpumem.toml");
    std::fs::write(&file, std::fs::read_to_string(&file).unwrap() + &rule).unwrap();
    let reload: Vec<&str> = ds.reload.iter().map(String::as_str).collect();
    let (ok, out) = agent.exec(&reload);
    assert!(ok, "{reload:?}: {out}");
    poll(
        "the reread rule in the list",
        || agent.limit(&["list"]).1,
        |l| l.contains(&second.path),
        || agent.logs(),
    );

    // The records are the pod's log (standard output), the agent's words
    // beside them.
    let logs = agent.logs();
    assert!(logs.contains(&format!("\"event\":\"alloc\",\"api\":\"cuMemAlloc_v2\",\"pid\":{pid}")), "{logs}");
    assert!(logs.contains("gpumem: ready"), "{logs}");
}
