//! The whole policy: the default action and every limit, from `--limit`
//! arguments and a TOML file (`--config`), validated together.
//!
//! ```toml
//! default_action = "signal:SIGKILL"
//!
//! [[limit]]
//! cgroup = "/kubepods.slice/team-a"
//! hard = "8GiB"
//! soft = "6GiB"
//! action = "deny"
//! fallback = "signal:SIGTERM"
//!
//! [[limit]]
//! comm = "python3"
//! hard = "2GiB"
//! device = 0
//! view = "driver"
//!
//! [[limit]]
//! namespace = "team-a"   # each pod of team-a on this node, on its own
//! hard = "16GiB"
//!
//! [[limit]]
//! pod = "team-b/trainer-*"
//! hard = "8GiB"
//! ```
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{
    env::{parse_env_limits, parse_env_max, EnvPolicy},
    error::SpecError,
    size::parse_size,
    spec::{parse_target, Action, Limit, Target, View},
};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config file {path}: default_action: {source}")]
    DefaultAction { path: PathBuf, source: SpecError },
    #[error("config file {path}: {key}: {source}")]
    Key { path: PathBuf, key: &'static str, source: SpecError },
    #[error("config file {path}, limit #{index}: {source}")]
    Rule { path: PathBuf, index: usize, source: SpecError },
    #[error("two limits for {target}{} ({first} and {second} bytes): keep one", on_device(*.device))]
    Duplicate { target: String, device: Option<u32>, first: u64, second: u64 },
    #[error("no cgroup {0} under the cgroup2 root: create it first, or check the path")]
    NoCgroup(String),
}

fn on_device(device: Option<u32>) -> String {
    device.map_or(String::new(), |d| format!(" on device {d}"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default_action: Option<String>,
    /// As `--env-limits`.
    env_limits: Option<String>,
    /// As `--env-limits-max`.
    env_limits_max: Option<String>,
    #[serde(default, rename = "limit")]
    limits: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    cgroup: Option<String>,
    pid: Option<u32>,
    comm: Option<String>,
    /// Each pod of the namespace, on its own.
    namespace: Option<String>,
    /// Each pod whose `namespace/name` matches, on its own.
    pod: Option<String>,
    /// With `namespace`: `pod` (each pod its own limit, the default) or
    /// `namespace` (one over all its pods on this node).
    per: Option<String>,
    hard: String,
    soft: Option<String>,
    action: Option<String>,
    fallback: Option<String>,
    device: Option<u32>,
    view: Option<String>,
}

impl Entry {
    fn into_limit(self) -> Result<Limit, SpecError> {
        let target = match (self.cgroup, self.pid, self.comm, self.namespace, self.pod) {
            (Some(c), None, None, None, None) => parse_target(&format!("cgroup:{c}"))?,
            (None, Some(p), None, None, None) => parse_target(&format!("pid:{p}"))?,
            (None, None, Some(c), None, None) => parse_target(&format!("comm:{c}"))?,
            (None, None, None, Some(n), None) => match self.per.as_deref() {
                None | Some("pod") => Target::Namespace(super::kube::namespace(&n)?),
                Some("namespace") => Target::NamespaceTotal(super::kube::namespace(&n)?),
                Some(p) => return Err(SpecError::Per(p.into())),
            },
            (None, None, None, None, Some(p)) => parse_target(&format!("pod:{p}"))?,
            _ => return Err(SpecError::OneTarget),
        };
        if let (Some(p), false) =
            (&self.per, matches!(target, Target::Namespace(_) | Target::NamespaceTotal(_)))
        {
            return Err(SpecError::Per(p.clone()));
        }
        let limit = Limit {
            target,
            hard: parse_size(&self.hard)?,
            soft: self.soft.as_deref().map(parse_size).transpose()?,
            action: self.action.as_deref().map(Action::parse).transpose()?,
            fallback: self.fallback.as_deref().map(Action::parse).transpose()?,
            device: self.device,
            view: self.view.as_deref().map(View::parse).transpose()?,
        };
        limit.check()?;
        Ok(limit)
    }
}

/// The default action, the limits, and what the agent does with limits
/// declared in workloads' environments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub default_action: Action,
    pub limits: Vec<Limit>,
    pub env: EnvPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            default_action: Action::Signal(nix::sys::signal::Signal::SIGKILL as i32),
            limits: Vec::new(),
            env: EnvPolicy::default(),
        }
    }
}

/// Parses a config file's text (`path` names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<Policy, ConfigError> {
    let file: File =
        toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
    let mut policy = Policy::default();
    if let Some(a) = file.default_action {
        policy.default_action =
            Action::parse(&a).map_err(|source| ConfigError::DefaultAction { path: path.into(), source })?;
    }
    let key = |key| move |source| ConfigError::Key { path: path.into(), key, source };
    if let Some(names) = file.env_limits {
        policy.env.honour = parse_env_limits(&names).map_err(key("env_limits"))?;
    }
    if let Some(max) = file.env_limits_max {
        policy.env.max = Some(parse_env_max(&max).map_err(key("env_limits_max"))?);
    }
    for (i, entry) in file.limits.into_iter().enumerate() {
        let limit = entry.into_limit().map_err(|source| ConfigError::Rule {
            path: path.into(),
            index: i + 1,
            source,
        })?;
        policy.limits.push(limit);
    }
    Ok(policy)
}

/// What the command line gives beside the file (each over the file's).
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub limits: Vec<Limit>,
    pub default_action: Option<Action>,
    pub env_limits: Option<u32>,
    pub env_limits_max: Option<u64>,
}

pub fn load(path: &Path) -> Result<Policy, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
    parse(path, &text)
}

/// The policy from a file (if any) plus `--limit`s and `--default-action`,
/// checked as a whole: no two rules for the same target and device, every
/// cgroup exists (`cgroup_exists` says so).
pub fn combine(
    file: Option<Policy>,
    cli: Given,
    cgroup_exists: impl Fn(&str) -> bool,
) -> Result<Policy, ConfigError> {
    let Given { limits: cli_limits, default_action, env_limits, env_limits_max } = cli;
    let mut policy = file.unwrap_or_default();
    if let Some(a) = default_action {
        policy.default_action = a;
    }
    if let Some(bits) = env_limits {
        policy.env.honour = bits;
    }
    if let Some(max) = env_limits_max {
        policy.env.max = Some(max);
    }
    policy.limits.extend(cli_limits);
    for (i, a) in policy.limits.iter().enumerate() {
        if let Some(b) = policy.limits[..i].iter().find(|b| b.target == a.target && b.device == a.device) {
            let target = a.target.to_string();
            return Err(ConfigError::Duplicate { target, device: a.device, first: b.hard, second: a.hard });
        }
        if let super::Target::Cgroup(p) = &a.target {
            if !cgroup_exists(p) {
                return Err(ConfigError::NoCgroup(p.clone()));
            }
        }
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use gpumem_common::declare::names::honour;

    use super::*;
    use crate::limits::policy::Target;

    fn p() -> PathBuf {
        PathBuf::from("/etc/gpumem.toml")
    }

    #[test]
    fn parses_the_documented_example() {
        let text = r#"
            default_action = "signal:SIGKILL"
            [[limit]]
            cgroup = "/kubepods.slice/team-a"
            hard = "8GiB"
            soft = "6GiB"
            action = "deny"
            fallback = "signal:SIGTERM"
            [[limit]]
            comm = "python3"
            hard = "2GiB"
            device = 0
            view = "driver"
        "#;
        let policy = parse(&p(), text).unwrap();
        assert_eq!((policy.limits[0].view, policy.limits[1].view), (None, Some(View::Driver)));
        let e = parse(&p(), "[[limit]]\ncgroup = \"/a\"\nhard = \"1G\"\nview = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("view `x`"), "{e}");
        assert_eq!(policy.default_action, Action::Signal(9));
        assert_eq!(policy.limits.len(), 2);
        assert_eq!(policy.limits[0].fallback, Some(Action::Signal(15)));
        assert_eq!(
            (policy.limits[1].target.clone(), policy.limits[1].device),
            (Target::Comm("python3".into()), Some(0))
        );
    }

    #[test]
    fn errors_name_the_file_and_rule() {
        let e = parse(&p(), "[[limit]]\ncgroup = \"/a\"\nhard = \"0\"\n").unwrap_err().to_string();
        assert!(e.contains("/etc/gpumem.toml, limit #1") && e.contains("zero"), "{e}");
        let e = parse(&p(), "[[limit]]\ncgroup = \"/a\"\npid = 3\nhard = \"1G\"\n").unwrap_err().to_string();
        assert!(e.contains("exactly one of cgroup, pid, comm, namespace or pod"), "{e}");
        let e = parse(&p(), "[[limit]]\nnamespace = \"Team\"\nhard = \"1G\"\n").unwrap_err().to_string();
        assert!(e.contains("limit #1") && e.contains("not a Kubernetes namespace"), "{e}");
        let e = parse(&p(), "[[limit]]\npod = \"trainer-*\"\nhard = \"1G\"\n").unwrap_err().to_string();
        assert!(e.contains("NAMESPACE/NAME"), "{e}");
        let total =
            parse(&p(), "[[limit]]\nnamespace = \"a\"\nper = \"namespace\"\nhard = \"1G\"\n").unwrap();
        assert_eq!(total.limits[0].target, Target::NamespaceTotal("a".into()));
        let e = parse(&p(), "[[limit]]\npod = \"a/b\"\nper = \"namespace\"\nhard = \"1G\"\n").unwrap_err();
        assert!(e.to_string().contains("with namespace only"), "{e}");
        let e =
            parse(&p(), "[[limit]]\ncgroup = \"/a\"\nhard = \"1G\"\ncolour = 1\n").unwrap_err().to_string();
        assert!(e.contains("unknown field") && e.contains("colour"), "{e}");
        let e = parse(&p(), "default_action = \"explode\"\n").unwrap_err().to_string();
        assert!(e.contains("explode"), "{e}");
    }

    #[test]
    fn combining_refuses_conflicts_and_unknown_cgroups() {
        let file = parse(&p(), "[[limit]]\ncgroup = \"/a\"\nhard = \"1G\"\n").unwrap();
        let given = |limits: &[&str]| Given {
            limits: limits.iter().map(|l| Limit::parse(l).unwrap()).collect(),
            ..Given::default()
        };
        let e = combine(Some(file.clone()), given(&["cgroup:/a=2G"]), |_| true).unwrap_err().to_string();
        assert!(e.contains("two limits for cgroup:/a"), "{e}");
        let other_device = given(&["cgroup:/a=2G,device=1"]);
        assert_eq!(combine(Some(file.clone()), other_device, |_| true).unwrap().limits.len(), 2);
        let e = combine(Some(file), given(&[]), |_| false).unwrap_err().to_string();
        assert!(e.contains("no cgroup /a"), "{e}");
        let policy =
            combine(None, Given { default_action: Some(Action::Audit), ..Given::default() }, |_| true)
                .unwrap();
        assert_eq!(policy.default_action, Action::Audit);
    }

    #[test]
    fn env_limits_from_the_file_and_over_it() {
        let file = parse(&p(), "env_limits = \"GPUMEM_LIMIT\"\nenv_limits_max = \"16GiB\"\n").unwrap();
        assert_eq!(file.env, EnvPolicy { honour: honour::GPUMEM_LIMIT, max: Some(16 << 30) });
        let cli = Given { env_limits: Some(0), ..Given::default() };
        assert_eq!(combine(Some(file), cli, |_| true).unwrap().env.honour, 0);
        assert_eq!(Policy::default().env.honour, honour::ALL);
        let e = parse(&p(), "env_limits = \"FOO\"\n").unwrap_err().to_string();
        assert!(e.contains("env_limits") && e.contains("`FOO`"), "{e}");
        let e = parse(&p(), "env_limits_max = \"0\"\n").unwrap_err().to_string();
        assert!(e.contains("env_limits_max") && e.contains("zero"), "{e}");
    }

    /// A rule as a `[[limit]]` table would hold it, and the rule it means.
    fn rule() -> impl proptest::strategy::Strategy<Value = (String, Limit)> {
        use proptest::prelude::*;
        let target = prop_oneof![
            "(/[a-z0-9_.-]{1,8}){1,4}".prop_map(|p| (format!("cgroup = \"{p}\""), Target::Cgroup(p))),
            (1u32..).prop_map(|n| (format!("pid = {n}"), Target::Pid(n))),
            "[a-z0-9_]{1,15}".prop_map(|c| (format!("comm = \"{c}\""), Target::Comm(c))),
            "[a-z0-9]{1,8}".prop_map(|n| (format!("namespace = \"{n}\""), Target::Namespace(n))),
            "[a-z0-9]{1,8}/[a-z0-9*?.-]{1,8}".prop_map(|p| (format!("pod = \"{p}\""), Target::Pod(p))),
        ];
        let action = prop_oneof![
            Just(None),
            Just(Some(Action::Audit)),
            Just(Some(Action::Deny)),
            (1i32..=31).prop_map(|s| Some(Action::Signal(s))),
        ];
        (target, 2u64..=1 << 50, any::<bool>(), action, any::<bool>(), proptest::option::of(0u32..16))
            .prop_map(|((line, target), hard, with_soft, action, with_fallback, device)| {
                let soft = with_soft.then_some(hard / 2);
                let fallback = (with_fallback && action == Some(Action::Deny)).then_some(Action::Signal(15));
                let mut text = format!("[[limit]]\n{line}\nhard = \"{hard}\"\n");
                let show = |a: Action| a.to_string();
                for (key, value) in [
                    ("soft", soft.map(|b| b.to_string())),
                    ("action", action.map(show)),
                    ("fallback", fallback.map(show)),
                ] {
                    if let Some(v) = value {
                        text += &format!("{key} = \"{v}\"\n");
                    }
                }
                if let Some(d) = device {
                    text += &format!("device = {d}\n");
                }
                (text, Limit { target, hard, soft, action, fallback, device, view: None })
            })
    }

    proptest::proptest! {
        /// Whatever the file holds, the answer is a policy or an error that
        /// names the file; never a panic.
        #[test]
        fn any_text_is_a_policy_or_an_error_naming_the_file(text in "(?s).{0,160}") {
            if let Err(e) = parse(&p(), &text) {
                proptest::prop_assert!(e.to_string().contains("/etc/gpumem.toml"), "{e}");
            }
        }

        /// A file of valid rules means exactly those rules, in order.
        #[test]
        fn valid_rules_are_read_exactly(rules in proptest::collection::vec(rule(), 0..5)) {
            let text: String = rules.iter().map(|(t, _)| format!("{t}\n")).collect();
            let policy = parse(&p(), &text).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{e}\n{text}")))?;
            let want: Vec<Limit> = rules.into_iter().map(|(_, l)| l).collect();
            proptest::prop_assert_eq!(policy.limits, want);
        }
    }
}
