//! The DaemonSet as deploy/kubernetes/ writes it, read as a kubelet reads
//! it: the agent container's command, arguments, environment, security
//! context and mounts, and the pod's host PID namespace; and the podman
//! command that runs the agent's image the same way (no kubelet runs
//! here). A change to the manifest changes what the container tests run.
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

/// One mount of the agent's container, and what backs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub name: String,
    pub path: String,
    pub read_only: bool,
    /// The node's directory (a `hostPath` volume), or None for the
    /// ConfigMap's.
    pub host_path: Option<String>,
}

/// What the kubelet would run.
#[derive(Debug, Clone)]
pub struct DaemonSet {
    pub host_pid: bool,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub caps_add: Vec<String>,
    pub caps_drop: Vec<String>,
    pub read_only_root: bool,
    pub run_as_user: Option<u64>,
    pub no_new_privileges: bool,
    pub seccomp_unconfined: bool,
    pub apparmor_unconfined: bool,
    pub mounts: Vec<Mount>,
    pub grace_seconds: u64,
    /// `gpumem.toml` as the ConfigMap holds it.
    pub config: String,
    /// The startup and liveness probes: each one's HTTP path and port.
    pub probes: Vec<(String, u16)>,
    /// The command the manifest's comment gives to reload the limits in
    /// the pod (after `kubectl exec POD --`).
    pub reload: Vec<String>,
}

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes").join(file)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

impl DaemonSet {
    /// deploy/kubernetes/30-daemonset.yaml and 20-configmap.yaml.
    pub fn read() -> Self {
        let text = std::fs::read_to_string(deploy("30-daemonset.yaml")).expect("reading the DaemonSet");
        let ds: Value = serde_yaml_ng::from_str(&text).expect("the DaemonSet is YAML");
        let pod = &ds["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let sc = &c["securityContext"];
        let volumes = pod["volumes"].as_sequence().cloned().unwrap_or_default();
        let mounts = c["volumeMounts"]
            .as_sequence()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let name = m["name"].as_str().unwrap_or_default().to_string();
                let volume = volumes.iter().find(|v| v["name"].as_str() == Some(name.as_str()));
                Mount {
                    path: m["mountPath"].as_str().unwrap_or_default().to_string(),
                    read_only: m["readOnly"].as_bool().unwrap_or(false),
                    host_path: volume.and_then(|v| v["hostPath"]["path"].as_str().map(String::from)),
                    name,
                }
            })
            .collect();
        let env = c["env"]
            .as_sequence()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
            .collect();
        let cm_text = std::fs::read_to_string(deploy("20-configmap.yaml")).expect("reading the ConfigMap");
        let cm: Value = serde_yaml_ng::from_str(&cm_text).expect("the ConfigMap is YAML");
        Self {
            host_pid: pod["hostPID"].as_bool().unwrap_or(false),
            command: strings(&c["command"]),
            args: strings(&c["args"]),
            env,
            caps_add: strings(&sc["capabilities"]["add"]),
            caps_drop: strings(&sc["capabilities"]["drop"]),
            read_only_root: sc["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
            run_as_user: sc["runAsUser"].as_u64(),
            no_new_privileges: sc["allowPrivilegeEscalation"].as_bool() == Some(false),
            seccomp_unconfined: sc["seccompProfile"]["type"].as_str() == Some("Unconfined"),
            apparmor_unconfined: sc["appArmorProfile"]["type"].as_str() == Some("Unconfined"),
            mounts,
            grace_seconds: pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
            config: cm["data"]["gpumem.toml"].as_str().unwrap_or_default().to_string(),
            probes: probes(c),
            reload: reload_command(&text),
        }
    }

    /// `podman run` arguments (after `run`) for the agent's image `image`,
    /// as the kubelet would run its container; `host` gives each mount's
    /// directory on this host (the manifest's `hostPath`, or a test's
    /// stand-in: the ConfigMap's directory, the node's driver libraries).
    /// `network`: the pod's network's stand-in (`host` where something on
    /// the host must reach its port, as Prometheus and the probes reach a
    /// pod's IP).
    pub fn podman_args(
        &self,
        name: &str,
        image: &str,
        network: &str,
        host: impl Fn(&Mount) -> PathBuf,
    ) -> Vec<String> {
        let mut a: Vec<String> =
            vec!["-d".into(), "--name".into(), name.into(), "--network".into(), network.into()];
        a.extend(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"].map(String::from));
        if self.host_pid {
            a.push("--pid=host".into());
        }
        a.extend(self.caps_drop.iter().map(|c| format!("--cap-drop={c}")));
        a.extend(self.caps_add.iter().map(|c| format!("--cap-add={c}")));
        if self.read_only_root {
            a.push("--read-only".into());
        }
        if let Some(uid) = self.run_as_user {
            a.extend(["--user".into(), uid.to_string()]);
        }
        let opts = [
            (self.no_new_privileges, "no-new-privileges"),
            (self.seccomp_unconfined, "seccomp=unconfined"),
            (self.apparmor_unconfined, "apparmor=unconfined"),
        ];
        for (_, o) in opts.iter().filter(|(on, _)| *on) {
            a.extend(["--security-opt".into(), (*o).into()]);
        }
        for (k, v) in &self.env {
            a.extend(["-e".into(), format!("{k}={v}")]);
        }
        for m in &self.mounts {
            let ro = if m.read_only { ":ro" } else { "" };
            a.extend(["-v".into(), format!("{}:{}{ro}", host(m).display(), m.path)]);
        }
        if let Some(entry) = self.command.first() {
            a.extend(["--entrypoint".into(), entry.clone()]);
        }
        a.push(image.into());
        a.extend(self.command.iter().skip(1).cloned());
        a.extend(self.args.iter().cloned());
        a
    }
}

/// The container's startup and liveness probes: path and port (a named
/// port resolved through the container's ports).
fn probes(c: &Value) -> Vec<(String, u16)> {
    ["startupProbe", "livenessProbe"]
        .iter()
        .filter_map(|p| {
            let get = &c[*p]["httpGet"];
            let port = match &get["port"] {
                Value::String(name) => {
                    c["ports"].as_sequence()?.iter().find(|p| p["name"].as_str() == Some(name.as_str()))?
                        ["containerPort"]
                        .as_u64()?
                }
                other => other.as_u64()?,
            };
            Some((get["path"].as_str()?.to_string(), u16::try_from(port).ok()?))
        })
        .collect()
}

/// The reload command of the manifest's header comment
/// (`kubectl -n gpumem exec POD -- pkill -HUP ...`): its words after `--`.
fn reload_command(text: &str) -> Vec<String> {
    let line = text.lines().find(|l| l.starts_with('#') && l.contains("exec POD -- pkill -HUP"));
    let after = line.and_then(|l| l.split_once(" -- ")).map_or("", |(_, c)| c);
    let mut words = Vec::new();
    let mut quoted = false;
    let mut word = String::new();
    for ch in after.chars() {
        match ch {
            '\'' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)))
            }
            c => word.push(c),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_reads_as_the_kubelet_runs_it() {
        let ds = DaemonSet::read();
        assert!(ds.host_pid && ds.read_only_root && ds.no_new_privileges);
        assert_eq!(ds.caps_add, ["BPF", "PERFMON", "SYS_PTRACE", "SYS_NICE"]);
        assert!(ds
            .mounts
            .iter()
            .any(|m| m.path == "/run/gpumem" && m.host_path.as_deref() == Some("/run/gpumem")));
        assert!(ds.mounts.iter().any(|m| m.name == "config" && m.host_path.is_none()));
        assert!(ds.config.contains("default_action"), "{}", ds.config);
        assert_eq!(ds.probes, [("/metrics".to_string(), 9400), ("/metrics".to_string(), 9400)]);
        assert_eq!(ds.reload[..3], ["pkill", "-HUP", "-f"]);
        assert!(ds.reload[3].starts_with("^/usr/local/bin/gpumem run"), "{:?}", ds.reload);
        let args =
            ds.podman_args("n", "img", "none", |m| PathBuf::from(m.host_path.clone().unwrap_or_default()));
        let at = args.iter().position(|a| a == "img").unwrap();
        assert_eq!(&args[at + 1..at + 3], ["run", "--config"]);
        assert!(args.contains(&"--pid=host".to_string()) && args.contains(&"--cap-drop=ALL".to_string()));
    }
}
