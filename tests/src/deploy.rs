//! The operators' files in `deploy/`, checked against the agent itself so
//! they cannot drift from it: the example limits file parses with the
//! agent's own policy parser (its commented-out rules too, uncommented);
//! the systemd unit and the DaemonSet start `gpumem run` with flags the
//! agent's own command line accepts, grant capabilities the agent's own
//! start-up check finds sufficient, and put the socket, the config, the
//! driver libraries and the kubelet's directories where the agent looks.
//! (`cargo xtask deploy-check` adds what needs outside tools:
//! `systemd-analyze verify`, Kubernetes' schemas, the ConfigMap's text.)
use std::{
    path::{Path, PathBuf},
    str::FromStr,
};

use caps::{Capability, CapsHashSet};
use clap::Parser;
use gpumem::{
    bpf::discover::SEARCH_DIRS,
    cli::{Cli, Command, RunArgs},
    control::DEFAULT_SOCKET,
    enrich::pods::KUBELET_LOGS,
    limits::policy::{config, Action, Target},
    privileges,
};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(file)
}

fn read(file: &str) -> String {
    let path = deploy(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `gpumem ARGS` as the agent's own parser reads it, which must be `run`.
fn run_args(args: &[String]) -> RunArgs {
    let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("gpumem refuses {args:?}:\n{e}"));
    let Command::Run(run) = cli.command else { panic!("{args:?} is not `gpumem run`") };
    *run
}

/// A systemd unit's `KEY=` value (the last one, as systemd reads it).
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
}

/// Capability names (`CAP_BPF`, or Kubernetes' `BPF`) as a set.
fn capabilities<'a>(names: impl IntoIterator<Item = &'a str>) -> CapsHashSet {
    names
        .into_iter()
        .map(|n| {
            let full = if n.starts_with("CAP_") { n.to_string() } else { format!("CAP_{n}") };
            Capability::from_str(&full).unwrap_or_else(|e| panic!("{n} is not a capability: {e}"))
        })
        .collect()
}

/// The example's rules with their leading `#` taken off (`#[[limit]]`,
/// `#key = value`); prose comments (`# ...`) stay comments.
fn uncommented(text: &str) -> String {
    let is_rule_line = |rest: &str| {
        rest.starts_with("[[limit]]")
            || rest
                .split_once(" = ")
                .is_some_and(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    };
    text.lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if is_rule_line(rest) => rest,
            _ => l,
        })
        .fold(String::new(), |acc, l| acc + l + "\n")
}

#[test]
fn example_config_parses_with_the_agents_parser() {
    let path = deploy("gpumem.toml");
    let policy = config::load(&path).unwrap_or_else(|e| panic!("{}", gpumem::chain(&e)));
    assert_eq!(policy.default_action, Action::Audit, "the example starts by recording, not stopping");
    assert_eq!(policy.env.honour, gpumem::limits::policy::env::EnvPolicy::default().honour);
    config::combine(Some(policy), config::Given::default(), |_| true).expect("no two rules for one target");
}

#[test]
fn example_rules_parse_when_uncommented() {
    let text = uncommented(&read("gpumem.toml"));
    let examples = text.lines().filter(|l| l.trim() == "[[limit]]").count();
    assert!(examples >= 3, "the example shows at least three rules, found {examples}:\n{text}");
    let policy = config::parse(&deploy("gpumem.toml"), &text)
        .unwrap_or_else(|e| panic!("{}\n---\n{text}", gpumem::chain(&e)));
    assert_eq!(policy.limits.len(), examples);
    let policy = config::combine(Some(policy), config::Given::default(), |_| true)
        .expect("no two rules for one target");
    let has = |f: &dyn Fn(&Target) -> bool| policy.limits.iter().any(|l| f(&l.target));
    assert!(has(&|t| matches!(t, Target::Cgroup(_))) && has(&|t| matches!(t, Target::Comm(_))));
    assert!(has(&|t| matches!(t, Target::Namespace(_))) && has(&|t| matches!(t, Target::Pod(_))));
    assert!(policy.limits.iter().any(|l| l.action == Some(Action::Deny) && l.fallback.is_some()));
    assert!(policy.env.max.is_some(), "the example shows a cap on declared limits");
}

#[test]
fn systemd_unit_runs_the_agent_with_flags_it_knows() {
    let unit = read("systemd/gpumem.service");
    let exec: Vec<String> = unit_value(&unit, "ExecStart").split_whitespace().map(String::from).collect();
    assert_eq!(exec[0], "/usr/local/bin/gpumem");
    let run = run_args(&exec);
    assert_eq!(run.config.as_deref(), Some(Path::new("/etc/gpumem.toml")));
    assert_eq!(run.metrics.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:9400"));
    let output = run.output.expect("records go to a file under LogsDirectory=");
    assert_eq!(
        output.parent(),
        Some(Path::new("/var/log").join(unit_value(&unit, "LogsDirectory")).as_path())
    );
    let socket_dir = Path::new("/run").join(unit_value(&unit, "RuntimeDirectory"));
    assert_eq!(run.socket.parent(), Some(socket_dir.as_path()), "the socket lies in RuntimeDirectory=");
    assert_eq!(run.socket, Path::new(DEFAULT_SOCKET), "`gpumem status` finds it without --socket");
    assert_eq!(unit_value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID", "SIGHUP rereads --config");
    // The unit starts the agent at the nice value --priority-boost asks
    // for, which it then keeps: no CAP_SYS_NICE needed, and no warning.
    assert_eq!(unit_value(&unit, "Nice"), format!("-{}", run.priority_boost));
}

#[test]
fn systemd_unit_grants_what_the_agent_checks_for() {
    let unit = read("systemd/gpumem.service");
    let bounding = capabilities(unit_value(&unit, "CapabilityBoundingSet").split_whitespace());
    assert!(privileges::sufficient(&bounding), "{bounding:?} would not load the programs");
    assert!(bounding.contains(&Capability::CAP_SYS_PTRACE), "other users' /proc/PID/maps need it");
    for not_needed in [Capability::CAP_SYS_ADMIN, Capability::CAP_KILL] {
        assert!(!bounding.contains(&not_needed), "{not_needed} is not needed");
    }
    for off in ["PrivateDevices=yes", "ProtectProc=invisible", "ProcSubset=pid", "PrivateNetwork=yes"] {
        assert!(!unit.lines().any(|l| l.trim() == off), "{off} breaks the agent (see the unit's comments)");
    }
}

/// A DaemonSet line `KEY: [JSON array]`, e.g. `args: ["run", ...]`.
fn yaml_list(yaml: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}: ");
    let line = yaml
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{key}: [...]` line in the DaemonSet"));
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("`{key}: {line}` is not a flow list of strings: {e}"))
}

/// Every `mountPath:` in the DaemonSet.
fn mount_paths(yaml: &str) -> Vec<&str> {
    yaml.lines().filter_map(|l| l.trim_start().strip_prefix("mountPath: ")).map(str::trim).collect()
}

#[test]
fn daemonset_runs_the_agent_with_flags_it_knows() {
    let yaml = read("kubernetes/30-daemonset.yaml");
    let mut argv = yaml_list(&yaml, "command");
    argv.extend(yaml_list(&yaml, "args"));
    let run = run_args(&argv);
    let mounts = mount_paths(&yaml);
    let config = run.config.expect("--config");
    let config_dir = config.parent().and_then(Path::to_str).unwrap();
    assert!(mounts.contains(&config_dir), "--config {} is not in a mounted volume", config.display());
    assert_eq!(config.file_name().and_then(|n| n.to_str()), Some("gpumem.toml"), "the ConfigMap's key");
    assert!(read("kubernetes/20-configmap.yaml").contains("\n  gpumem.toml: |\n"), "the ConfigMap holds it");
    assert!(yaml.contains("\n            name: gpumem-config\n"), "the volume is the ConfigMap");
    let metrics = run.metrics.expect("--metrics");
    assert!(metrics.ip().is_unspecified(), "Prometheus scrapes the pod's address");
    let port = metrics.port().to_string();
    assert!(yaml.contains(&format!("containerPort: {port}\n")), "containerPort {port}");
    assert!(yaml.contains(&format!("prometheus.io/port: \"{port}\"\n")), "annotation port {port}");
    let socket_dir = run.socket.parent().and_then(Path::to_str).unwrap();
    assert!(mounts.contains(&socket_dir), "the control socket's directory is the node's");
}

#[test]
fn daemonset_mounts_what_the_agent_reads() {
    let yaml = read("kubernetes/30-daemonset.yaml");
    let mounts = mount_paths(&yaml);
    for dir in ["pods", "containers"] {
        let path = format!("{KUBELET_LOGS}/{dir}");
        assert!(mounts.contains(&path.as_str()), "the kubelet's {path} names pods");
    }
    for path in ["/sys/fs/cgroup", "/sys/fs/bpf"] {
        assert!(mounts.contains(&path), "{path} is mounted");
    }
    // Each driver library mount is, or holds, a directory the agent
    // searches for libcuda.so.
    let driver: Vec<&str> = mounts.iter().copied().filter(|m| m.contains("nvidia")).collect();
    assert!(!driver.is_empty(), "the host's driver libraries are mounted");
    for m in driver {
        assert!(
            SEARCH_DIRS.iter().any(|d| Path::new(d).starts_with(m)),
            "{m} holds none of the directories gpumem searches: {SEARCH_DIRS:?}"
        );
    }
    let caps = capabilities(yaml_list(&yaml, "add").iter().map(String::as_str));
    assert!(privileges::sufficient(&caps), "{caps:?} would not load the programs");
    assert!(caps.contains(&Capability::CAP_SYS_PTRACE), "other containers' /proc/PID/maps need it");
    assert!(caps.contains(&Capability::CAP_SYS_NICE), "--priority-boost, on by default, needs it");
    assert_eq!(yaml_list(&yaml, "drop"), ["ALL"]);
    assert!(yaml.contains("\n      hostPID: true\n"), "the host's processes are the agent's to see");
}
