//! Writing the policy into the kernel's limit maps: one `LIMITS` slot per
//! rule, indexed by process, cgroup or comm.
use std::{collections::HashMap, path::Path};

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use gpumem_common::{limit_action, limit_scope, map_name, LimitKey, LimitRule, DEVICE_ANY, MAX_LIMITS};

use super::{BpfError, Tracer};
use crate::policy::{config::Policy, Action, Limit, Target};

/// A rule as the kernel applies it, with what the records call it.
#[derive(Debug, Clone)]
pub struct Installed {
    pub slot: u32,
    pub limit: Limit,
    pub action: Action,
}

#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("{0} limits given; gpumem holds at most {MAX_LIMITS}")]
    TooMany(usize),
    #[error(
        "{target}: action deny needs a kernel that lets uprobe programs write registers, and this one does \
         not ({reason}); add a fallback, e.g. `,fallback=signal:SIGTERM`"
    )]
    DenyUnsupported { target: String, reason: String },
    #[error("{target}: cannot find cgroup {path} under {root}")]
    NoCgroup { target: String, path: String, root: String },
    #[error("writing limit for {target} into the kernel failed")]
    Write { target: String, source: Box<aya::maps::MapError> },
    #[error(transparent)]
    Bpf(#[from] BpfError),
}

/// The action the kernel will take for `limit`: deny where the kernel can
/// (`deny_reason` None), else its fallback; `deny_reason` says why not.
pub fn effective_action(
    limit: &Limit,
    default: Action,
    deny_reason: Option<&str>,
) -> Result<Action, LimitError> {
    let action = limit.action.unwrap_or(default);
    if action != Action::Deny {
        return Ok(action);
    }
    match (deny_reason, limit.fallback) {
        (None, _) => Ok(Action::Deny),
        (Some(_), Some(fallback)) => Ok(fallback),
        (Some(reason), None) => {
            Err(LimitError::DenyUnsupported { target: limit.target.to_string(), reason: reason.to_string() })
        }
    }
}

/// Writes every rule of `policy` into the kernel.
pub fn install(
    tracer: &mut Tracer,
    policy: &Policy,
    cgroup_root: Option<&Path>,
    deny_reason: Option<&str>,
) -> Result<Vec<Installed>, LimitError> {
    if policy.limits.len() > MAX_LIMITS as usize {
        return Err(LimitError::TooMany(policy.limits.len()));
    }
    let mut rules: Array<MapData, LimitRule> = tracer.take_map(map_name::LIMITS)?;
    let mut index: BpfHashMap<MapData, LimitKey, u32> = tracer.take_map(map_name::LIMIT_INDEX)?;
    let mut comms: BpfHashMap<MapData, [u8; 16], u32> = tracer.take_map(map_name::COMM_LIMITS)?;
    let mut installed = Vec::new();
    for (slot, limit) in policy.limits.iter().enumerate() {
        let slot = slot as u32;
        let target = limit.target.to_string();
        let action = effective_action(limit, policy.default_action, deny_reason)?;
        let (code, signal) = match action {
            Action::Audit => (limit_action::AUDIT, 0),
            Action::Signal(s) => (limit_action::SIGNAL, s as u32),
            Action::Deny => (limit_action::DENY, 0),
        };
        let rule = LimitRule {
            hard: limit.hard,
            soft: limit.soft.unwrap_or(0),
            action: code,
            signal,
            device: limit.device.unwrap_or(DEVICE_ANY),
            active: 1,
            ..LimitRule::default()
        };
        let write = |e| LimitError::Write { target: target.clone(), source: Box::new(e) };
        rules.set(slot, rule, 0).map_err(write)?;
        match &limit.target {
            Target::Pid(pid) => {
                let key = LimitKey { scope: limit_scope::PROCESS, _pad: 0, id: *pid as u64 };
                index.insert(key, slot, 0).map_err(write)?;
            }
            Target::Cgroup(path) => {
                let id = cgroup_root
                    .and_then(|root| {
                        crate::enrich::cgroup::cgroup_id(&root.join(path.trim_start_matches('/'))).ok()
                    })
                    .ok_or_else(|| LimitError::NoCgroup {
                        target: target.clone(),
                        path: path.clone(),
                        root: cgroup_root.map_or("(no cgroup2 mount)".into(), |r| r.display().to_string()),
                    })?;
                let key = LimitKey { scope: limit_scope::CGROUP, _pad: 0, id };
                index.insert(key, slot, 0).map_err(write)?;
            }
            Target::Comm(comm) => {
                let mut key = [0u8; 16];
                key[..comm.len()].copy_from_slice(comm.as_bytes());
                comms.insert(key, slot, 0).map_err(write)?;
            }
        }
        installed.push(Installed { slot, limit: limit.clone(), action });
    }
    // Last: the kernel starts applying limits once every rule is in place.
    let mut in_force: Array<MapData, u32> = tracer.take_map(map_name::LIMITS_IN_FORCE)?;
    in_force
        .set(0, installed.len() as u32, 0)
        .map_err(|e| LimitError::Write { target: "(all)".into(), source: Box::new(e) })?;
    Ok(installed)
}

/// Names of installed rules by slot, for the records.
pub fn names(installed: &[Installed]) -> HashMap<u32, (String, Action)> {
    installed.iter().map(|i| (i.slot, (i.limit.target.to_string(), i.action))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_needs_a_kernel_or_a_fallback() {
        let deny = Limit::parse("pid:1=1G,action=deny").unwrap();
        let err = effective_action(&deny, Action::Audit, Some("invalid bpf_context access"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("write registers") && err.contains("fallback=signal:SIGTERM"), "{err}");
        let with_fallback = Limit::parse("pid:1=1G,action=deny,fallback=signal:SIGTERM").unwrap();
        assert_eq!(effective_action(&with_fallback, Action::Audit, Some("no")).unwrap(), Action::Signal(15));
        let plain = Limit::parse("pid:1=1G").unwrap();
        assert_eq!(effective_action(&plain, Action::Audit, None).unwrap(), Action::Audit);
        // Where the kernel can, deny is deny, fallback or not.
        assert_eq!(effective_action(&deny, Action::Audit, None).unwrap(), Action::Deny);
        assert_eq!(effective_action(&with_fallback, Action::Audit, None).unwrap(), Action::Deny);
    }
}
