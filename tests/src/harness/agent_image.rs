//! The agent's own image (`cargo xtask image`, saved as an OCI archive and
//! named in `GPUMEM_IMAGE`) run by podman as the DaemonSet specifies
//! (`daemonset.rs`), talked to through its socket on the mounted
//! directory, as a node's root would.
use std::{path::PathBuf, process::Command};

use gpumem::output::{Line, StatusReport};

use super::{
    daemonset::{DaemonSet, Mount},
    env::{paths, provided},
    podman::{Cli, Podman},
    poll::poll,
};

/// The agent's container, removed (stopped at once) when dropped.
pub struct AgentContainer {
    pub name: String,
    cli: Cli,
    /// The control socket, on the host's side of the `run` mount.
    pub socket: PathBuf,
}

impl Podman {
    /// The agent's image from `GPUMEM_IMAGE`, loaded into this podman's
    /// storage: its name, or None (the test is skipped, saying why).
    pub fn agent_image(&self) -> Option<String> {
        let archive = provided("GPUMEM_IMAGE", "builds the agent's image (`cargo xtask image`) and sets it")?;
        Some(self.load(&archive))
    }

    /// The image of another build (`GPUMEM_IMAGE_NEXT`: the same source
    /// with a build note in its eBPF object) that an upgrade replaces the
    /// agent's image with, loaded: its name, or None (skipped, saying why).
    pub fn next_agent_image(&self) -> Option<String> {
        let why = "builds a second image of another build (xtask's image::upgrade_pair) and sets it";
        Some(self.load(&provided("GPUMEM_IMAGE_NEXT", why)?))
    }

    /// Loads the OCI archive `archive`: the image's name.
    fn load(&self, archive: &std::ffi::OsStr) -> String {
        let out =
            self.cli.command().args(["load", "--quiet", "-i"]).arg(archive).output().expect("podman load");
        assert!(out.status.success(), "podman load: {}", String::from_utf8_lossy(&out.stderr));
        // "Loaded image: localhost/gpumem:0.1.0-abc" (one per tag).
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let name = text.lines().find_map(|l| l.strip_prefix("Loaded image: ")).map(str::trim);
        name.unwrap_or_else(|| panic!("podman load said: {text}")).to_string()
    }

    /// Starts `image` as `ds` runs the agent (on `network`, see
    /// `DaemonSet::podman_args`), each mount's host side as `host` gives
    /// it, and waits until it answers on its socket (the
    /// `run` mount's `gpumem.sock`).
    pub fn run_agent(
        &self,
        name: &str,
        (ds, network): (&DaemonSet, &str),
        image: &str,
        host: impl Fn(&Mount) -> PathBuf,
    ) -> AgentContainer {
        let run =
            ds.mounts.iter().find(|m| m.path == "/run/gpumem").expect("the DaemonSet mounts /run/gpumem");
        let socket = host(run).join("gpumem.sock");
        let args = ds.podman_args(name, image, network, host);
        // The command, for the test's transcript (shown when it fails).
        println!("$ podman run {}", args.join(" "));
        let out = self.cli.command().arg("run").args(&args).output().expect("podman run");
        let c = AgentContainer { name: name.to_string(), cli: self.cli.clone(), socket };
        assert!(out.status.success(), "podman run: {}", String::from_utf8_lossy(&out.stderr));
        poll(
            "the agent in its container to answer on its socket",
            || c.try_status(),
            Option::is_some,
            || c.logs(),
        );
        // The runtime copies the container's output to its log on its own
        // time: an agent can answer before its start's messages are there.
        poll(
            "the agent's start in its container's log",
            || c.logs(),
            |l| l.contains("gpumem: ready"),
            String::new,
        );
        c
    }
}

impl AgentContainer {
    /// What the container wrote: the records (standard output) and the
    /// agent's messages (standard error), as `kubectl logs` shows them.
    pub fn logs(&self) -> String {
        let out = self.cli.command().args(["logs", &self.name]).output().expect("podman logs");
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
    }

    /// The records it wrote (its standard output), typed.
    pub fn lines(&self) -> Vec<Line> {
        let out = self.cli.command().args(["logs", &self.name]).output().expect("podman logs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a record that does not read back ({e}): {l}"))
            })
            .collect()
    }

    /// `podman stop` with `grace` seconds (SIGTERM, as the kubelet sends
    /// it), then the agent's exit code.
    pub fn stop(&self, grace: u64) -> i64 {
        println!("$ podman stop -t {grace} {}", self.name);
        let out = self
            .cli
            .command()
            .args(["stop", "-t", &grace.to_string(), &self.name])
            .output()
            .expect("podman stop");
        assert!(out.status.success(), "podman stop: {}", String::from_utf8_lossy(&out.stderr));
        let out = self
            .cli
            .command()
            .args(["inspect", "--format", "{{.State.ExitCode}}", &self.name])
            .output()
            .expect("podman inspect");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(-1)
    }

    /// `gpumem status --json` from the host, through the mounted socket.
    pub fn try_status(&self) -> Option<StatusReport> {
        let out = Command::new(paths().agent)
            .args(["status", "--json", "--socket"])
            .arg(&self.socket)
            .output()
            .ok()?;
        out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
    }

    pub fn status(&self) -> StatusReport {
        self.try_status().unwrap_or_else(|| panic!("no status from the agent's container:\n{}", self.logs()))
    }

    /// Waits until `cond` holds for its status.
    pub fn wait_for_status(&self, what: &str, cond: impl Fn(&StatusReport) -> bool) -> StatusReport {
        poll(what, || self.try_status(), |s| s.as_ref().is_some_and(&cond), || self.logs()).unwrap()
    }

    /// `gpumem limit ARGS` from the host, through the mounted socket.
    pub fn limit(&self, args: &[&str]) -> (bool, String) {
        let (ok, out, err) = super::agent::limit_through(&self.socket, args);
        (ok, out + &err)
    }

    /// Runs `argv` in the agent's container (`podman exec`), as `kubectl
    /// exec` would.
    pub fn exec(&self, argv: &[&str]) -> (bool, String) {
        let out = self.cli.command().args(["exec", &self.name]).args(argv).output().expect("podman exec");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

impl Drop for AgentContainer {
    fn drop(&mut self) {
        let _ = self.cli.command().args(["rm", "-f", "-t", "5", &self.name]).output();
    }
}
