//! One limit: what it applies to, how much, and what happens when a call
//! would cross it, and what the processes under it are told the card has.
//! `--limit TARGET=HARD[,soft=SIZE][,action=A][,fallback=A][,device=N][,view=V]`.
use std::fmt;

use gpumem_common::{
    declare::{
        action::{self, ActionError},
        rule::{self, RuleText},
        signal::{self, SignalError},
    },
    limit_action, TASK_COMM_LEN,
};

use serde::{Deserialize, Serialize};

use super::error::SpecError;

/// What a limit applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// A cgroup v2 path (relative to the cgroup2 root) and everything below.
    Cgroup(String),
    /// One process.
    Pid(u32),
    /// Processes whose comm is this, including ones that start later.
    Comm(String),
    /// Each pod of a Kubernetes namespace on this node, on its own (the
    /// agent makes a rule on each pod's cgroup, see `limits/pods.rs`).
    Namespace(String),
    /// The pods of a Kubernetes namespace on this node together: one rule
    /// over all their cgroups (`per=namespace`).
    #[serde(rename = "namespace_total")]
    NamespaceTotal(String),
    /// Each pod whose `namespace/name` matches this (`team-a/trainer-*`:
    /// the name a glob), on its own.
    Pod(String),
}

impl Target {
    /// A target the agent resolves into pods' cgroups (`limits/pods.rs`).
    pub fn is_pods(&self) -> bool {
        matches!(self, Target::Namespace(_) | Target::NamespaceTotal(_) | Target::Pod(_))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cgroup(p) => write!(f, "cgroup:{p}"),
            Target::Pid(p) => write!(f, "pid:{p}"),
            Target::Comm(c) => write!(f, "comm:{c}"),
            Target::Namespace(n) => write!(f, "namespace:{n}"),
            Target::NamespaceTotal(n) => write!(f, "namespace:{n},per=namespace"),
            Target::Pod(p) => write!(f, "pod:{p}"),
        }
    }
}

/// What happens to a call that would cross a hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// Record it; the call goes ahead and is charged.
    Audit,
    /// `bpf_send_signal` to the caller before the call runs; not charged.
    Signal(i32),
    /// The call returns CUDA_ERROR_OUT_OF_MEMORY without entering the driver
    /// (needs a kernel that lets uprobe programs write registers).
    Deny,
}

impl Action {
    /// `audit`, `deny`, `signal` or `signal:SIG`, as the kernel reads an
    /// action in `GPUMEM_LIMIT` (`gpumem_common::declare::action`).
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        action::parse(text.as_bytes()).map(|(code, signal)| Self::of(code, signal)).map_err(|e| match e {
            ActionError::Action => SpecError::Action(text.into()),
            ActionError::SignalRange(n) => SpecError::SignalRange(n),
            ActionError::Signal => SpecError::Signal(text.split_once(':').map_or(text, |(_, s)| s).into()),
        })
    }

    /// The action a kernel code (`limit_action`) and its signal name.
    pub fn of(code: u32, signal: u32) -> Self {
        match code {
            limit_action::AUDIT => Action::Audit,
            limit_action::DENY => Action::Deny,
            _ => Action::Signal(signal as i32),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Audit => write!(f, "audit"),
            Action::Signal(s) => write!(f, "signal:{s}"),
            Action::Deny => write!(f, "deny"),
        }
    }
}

/// What the processes under a limit are told the card has
/// (`cuMemGetInfo`, `cuDeviceTotalMem`): so frameworks that size
/// themselves from the card (JAX's preallocation, TensorFlow, batch-size
/// logic) size themselves to the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum View {
    /// The limit as the card's size, what is left under it as free (needs
    /// a kernel that lets uprobe programs write user memory).
    Limit,
    /// The card as the driver reports it.
    Driver,
}

impl View {
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        match text.trim() {
            "limit" => Ok(View::Limit),
            "driver" => Ok(View::Driver),
            _ => Err(SpecError::View(text.into())),
        }
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            View::Limit => "limit",
            View::Driver => "driver",
        })
    }
}

/// `SIGTERM`, `TERM` or `15` (1 to 64: real-time signals by number).
pub fn parse_signal(text: &str) -> Result<i32, SpecError> {
    signal::parse(text.as_bytes()).map(|n| n as i32).map_err(|e| match e {
        SignalError::Range(n) => SpecError::SignalRange(n),
        SignalError::Unknown => SpecError::Signal(text.into()),
    })
}

/// A limit rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    pub target: Target,
    /// Bytes; a call that would take usage above this gets `action`.
    pub hard: u64,
    /// Bytes; crossing it upwards emits one `limit_soft` record.
    pub soft: Option<u64>,
    /// None: the agent's default action.
    pub action: Option<Action>,
    /// Used instead of `deny` where the kernel cannot deny.
    pub fallback: Option<Action>,
    /// Only memory on this device counts (None: all devices).
    pub device: Option<u32>,
    /// None: `limit` where the kernel allows it, else `driver`.
    #[serde(default)]
    pub view: Option<View>,
}

impl Limit {
    /// Parses a `--limit` argument: the target, then the right-hand side
    /// as the kernel reads `GPUMEM_LIMIT` (`gpumem_common::declare::rule`).
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        let (target, rest) = text.split_once('=').ok_or_else(|| SpecError::NoSize(text.into()))?;
        let (target, rest) = per(parse_target(target)?, rest)?;
        let t = super::rule_text::read(&rest, &target.to_string(), text)?;
        Ok(Limit::from_text(target, &t))
    }

    /// The rule a right-hand side says, on `target`.
    pub fn from_text(target: Target, t: &RuleText) -> Self {
        let action = |code: u32, signal| (code != 0).then(|| Action::of(code, signal));
        Limit {
            target,
            hard: t.hard,
            soft: (t.soft != 0).then_some(t.soft),
            action: action(t.action, t.signal),
            fallback: action(t.fallback, t.fallback_signal),
            device: (t.has_device != 0).then_some(t.device),
            view: match t.view {
                rule::view::LIMIT => Some(View::Limit),
                rule::view::DRIVER => Some(View::Driver),
                _ => None,
            },
        }
    }

    /// Checks the rule on its own.
    pub fn check(&self) -> Result<(), SpecError> {
        let target = || self.target.to_string();
        if let Some(soft) = self.soft.filter(|&soft| soft >= self.hard) {
            return Err(SpecError::SoftNotBelowHard { target: target(), soft, hard: self.hard });
        }
        if matches!(self.fallback, Some(Action::Deny)) {
            return Err(SpecError::FallbackIsDeny(target()));
        }
        if self.fallback.is_some() && self.action != Some(Action::Deny) {
            return Err(SpecError::FallbackWithoutDeny(target()));
        }
        Ok(())
    }
}

/// A rule on a namespace's `per=pod` (each pod its own, the default) or
/// `per=namespace` (one over all its pods), taken out of the right-hand
/// side (the rest is the kernel's to read, as `GPUMEM_LIMIT` is).
fn per(target: Target, rest: &str) -> Result<(Target, String), SpecError> {
    let mut per = None;
    let mut kept: Vec<&str> = Vec::new();
    for part in rest.split(',') {
        match part.split_once('=') {
            Some((k, v)) if k.trim() == "per" => per = Some(v.trim()),
            _ => kept.push(part),
        }
    }
    let target = match (per, target) {
        (None | Some("pod"), t @ Target::Namespace(_)) => t,
        (Some("namespace"), Target::Namespace(n)) => Target::NamespaceTotal(n),
        (None, t) => t,
        (Some(p), _) => return Err(SpecError::Per(p.into())),
    };
    Ok((target, kept.join(",")))
}

/// `cgroup:/path`, `pid:N`, `comm:NAME`, `namespace:NS`, `pod:NS/GLOB`.
pub fn parse_target(text: &str) -> Result<Target, SpecError> {
    match text.trim().split_once(':') {
        Some(("namespace", n)) => super::kube::namespace(n).map(Target::Namespace),
        Some(("pod", p)) => super::kube::pod_glob(p).map(Target::Pod),
        Some(("cgroup", p)) if p.starts_with('/') => Ok(Target::Cgroup(normalize_cgroup(p))),
        Some(("cgroup", p)) => Err(SpecError::CgroupNotAbsolute(p.into())),
        Some(("pid", p)) => {
            p.trim().parse::<u32>().ok().filter(|&n| n > 0).map(Target::Pid).ok_or(SpecError::Pid(p.into()))
        }
        Some(("comm", c)) if !c.is_empty() && c.len() < TASK_COMM_LEN => Ok(Target::Comm(c.to_string())),
        Some(("comm", c)) => Err(SpecError::Comm(c.into())),
        _ => Err(SpecError::Target(text.into())),
    }
}

fn normalize_cgroup(p: &str) -> String {
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_specs() {
        let l = Limit::parse("cgroup:/team-a/=8GiB,soft=6GiB,action=deny,fallback=signal:SIGTERM,device=1")
            .unwrap();
        assert_eq!(l.target, Target::Cgroup("/team-a".into()));
        assert_eq!((l.hard, l.soft), (8 << 30, Some(6 << 30)));
        assert_eq!((l.action, l.fallback, l.device), (Some(Action::Deny), Some(Action::Signal(15)), Some(1)));
        let l = Limit::parse("pid:1234=512MiB").unwrap();
        assert_eq!((l.target, l.hard, l.action), (Target::Pid(1234), 512 << 20, None));
        assert_eq!(Limit::parse("comm:python3=1G,action=audit").unwrap().action, Some(Action::Audit));
        assert_eq!(Limit::parse("pid:1=1G,view=driver").unwrap().view, Some(View::Driver));
        assert_eq!(Limit::parse("pid:1=1G, view = limit").map(|l| l.view), Ok(Some(View::Limit)));
        let l = Limit::parse("namespace:team-a=64GiB,per=namespace,soft=60GiB").unwrap();
        assert_eq!((l.target.clone(), l.soft), (Target::NamespaceTotal("team-a".into()), Some(60 << 30)));
        assert_eq!(l.target.to_string(), "namespace:team-a,per=namespace");
        assert_eq!(Limit::parse("namespace:a=1G,per=pod").unwrap().target, Target::Namespace("a".into()));
        let l = Limit::parse("namespace:team-a=16GiB").unwrap();
        assert_eq!((l.target.to_string(), l.target.is_pods()), ("namespace:team-a".into(), true));
        let l = Limit::parse("pod:team-a/trainer-*=8GiB,action=deny").unwrap();
        assert_eq!((l.target, l.action), (Target::Pod("team-a/trainer-*".into()), Some(Action::Deny)));
    }

    #[test]
    fn actions_and_signals() {
        assert_eq!(Action::parse("signal"), Ok(Action::Signal(9)));
        assert_eq!(Action::parse("signal:TERM"), Ok(Action::Signal(15)));
        assert_eq!(Action::parse("signal:10"), Ok(Action::Signal(10)));
        assert_eq!(Action::parse("signal:sigusr1"), Ok(Action::Signal(10)));
        assert!(Action::parse("signal:SIGFOO").unwrap_err().to_string().contains("SIGFOO"));
        assert!(Action::parse("kill").unwrap_err().to_string().contains("not an action"));
        assert!(Action::parse("signal:65").unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn refusals_name_the_problem() {
        let err = |s: &str| Limit::parse(s).unwrap_err().to_string();
        assert!(err("cgroup:/a").contains("expected TARGET=SIZE"));
        assert!(err("cgroup:a=1G").contains("starting with /"));
        assert!(err("pid:0=1G").contains("not a process id"));
        assert!(err("host:x=1G").contains("not a target"));
        assert!(err("pid:1=0").contains("zero"));
        assert!(err("pid:1=1G,soft=2G").contains("below the hard limit"));
        assert!(err("pid:1=1G,action=audit,fallback=signal").contains("only applies to action=deny"));
        assert!(err("pid:1=1G,action=deny,fallback=deny").contains("cannot itself be deny"));
        assert!(err("pid:1=1G,colour=red").contains("unknown key"));
        assert!(err("pid:1=1G,view=guess").contains("use `limit`"));
        assert!(err("comm:averyveryverylongname=1G").contains("15 characters"));
        assert!(err("namespace:Team-A=1G").contains("not a Kubernetes namespace"));
        assert!(err("pod:trainer=1G").contains("NAMESPACE/NAME"));
        assert!(err("namespace:a=1G,per=node").contains("per `node`"));
        assert!(err("cgroup:/a=1G,per=namespace").contains("with namespace only"));
    }
}
