//! The kernel's limit maps: one `LIMITS` slot per rule, indexed by process,
//! cgroup or comm; written at start-up and changed at run time
//! (`gpumem limit set|clear`, SIGHUP). The only place that writes them.
use std::{collections::HashMap, path::PathBuf};

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use gpumem_common::{
    limit_action, limit_scope, limit_view, limits_in_force, map_name, LimitKey, LimitRule, LimitState,
    DEVICE_ANY, MAX_LIMITS, TASK_COMM_LEN,
};

use super::{
    matcher::{cgroup_dir, Matcher},
    policy::{config::Policy, Action, Limit, Target, View},
};
use crate::{
    bpf::{BpfError, Tracer},
    output::LimitStatus,
};

/// A rule as the kernel applies it, with what the records call it.
#[derive(Debug, Clone)]
pub struct Installed {
    pub slot: u32,
    pub limit: Limit,
    pub action: Action,
    /// What the processes under it are told the card has.
    pub view: View,
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
    #[error(
        "{target}: view=limit needs a kernel that lets uprobe programs write user memory, and this one does \
         not ({reason}); use view=driver, or leave view out (processes under the limit then see the card as \
         it is)"
    )]
    ViewUnsupported { target: String, reason: String },
    #[error("no limit on {0} is in force (see `gpumem limit list`)")]
    NoSuchLimit(String),
    #[error("all {MAX_LIMITS} limit slots were used since the agent started; restart it to reuse them")]
    NoSlot,
    #[error("{target}: cannot find cgroup {path} under {root}")]
    NoCgroup { target: String, path: String, root: String },
    #[error("writing limit for {target} into the kernel failed")]
    Write { target: String, source: Box<aya::maps::MapError> },
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error(transparent)]
    Spec(#[from] super::policy::SpecError),
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

/// What the processes under `limit` are told the card has: as it says,
/// else `limit` where the kernel can (`view_reason` None), else `driver`.
pub fn effective_view(limit: &Limit, view_reason: Option<&str>) -> Result<View, LimitError> {
    match (limit.view, view_reason) {
        (Some(View::Limit), Some(reason)) => {
            Err(LimitError::ViewUnsupported { target: limit.target.to_string(), reason: reason.to_string() })
        }
        (Some(view), _) => Ok(view),
        (None, None) => Ok(View::Limit),
        (None, Some(_)) => Ok(View::Driver),
    }
}

/// The kernel's limit maps and the rules in them. Rules are written here
/// only; the kernel writes usage (`LIMIT_STATE`) only, so a rule can be
/// rewritten while calls are being counted. A slot, once used, is never
/// given to another target while the agent runs: allocations counted under
/// it keep releasing from it when freed.
pub struct LimitTable {
    rules: Array<MapData, LimitRule>,
    state: Array<MapData, LimitState>,
    base: Array<MapData, u64>,
    index: BpfHashMap<MapData, LimitKey, u32>,
    comms: BpfHashMap<MapData, [u8; TASK_COMM_LEN], u32>,
    in_force: Array<MapData, u32>,
    cgroup_root: Option<PathBuf>,
    deny_reason: Option<String>,
    /// Why this kernel cannot answer queries with a limit's view (None: it can).
    view_reason: Option<String>,
    default_action: Action,
    /// By slot: the rule, and whether it is in force (false: cleared).
    slots: Vec<(Installed, bool)>,
}

impl LimitTable {
    /// Takes the limit maps out of `tracer`. `deny_reason`: why this kernel
    /// cannot deny (None: it can).
    pub fn open(
        tracer: &mut Tracer,
        cgroup_root: Option<PathBuf>,
        deny_reason: Option<String>,
        default_action: Action,
    ) -> Result<Self, LimitError> {
        Ok(Self {
            rules: tracer.take_map(map_name::LIMITS)?,
            state: tracer.take_map(map_name::LIMIT_STATE)?,
            base: tracer.take_map(map_name::LIMIT_BASE)?,
            index: tracer.take_map(map_name::LIMIT_INDEX)?,
            comms: tracer.take_map(map_name::COMM_LIMITS)?,
            in_force: tracer.take_map(map_name::LIMITS_IN_FORCE)?,
            cgroup_root,
            deny_reason,
            view_reason: tracer.view_refusal().map(str::to_string),
            default_action,
            slots: Vec::new(),
        })
    }

    /// Writes every rule of `policy` (at start-up: nothing is held under
    /// any of them yet).
    pub fn install(&mut self, policy: &Policy) -> Result<Vec<Installed>, LimitError> {
        if policy.limits.len() > MAX_LIMITS as usize {
            return Err(LimitError::TooMany(policy.limits.len()));
        }
        self.default_action = policy.default_action;
        let mut out = Vec::new();
        for limit in &policy.limits {
            out.push(self.add(limit)?);
        }
        self.update_in_force()?;
        Ok(out)
    }

    /// Sets `limit` at run time: a target with a rule in force gets the new
    /// numbers and action, its usage kept; a new target gets a slot, with
    /// `carried` (what it holds now, see `carried.rs`) as its base. The
    /// bool: whether the slot is new.
    pub fn set(&mut self, limit: &Limit, carried: u64) -> Result<(Installed, bool), LimitError> {
        let target = limit.target.to_string();
        if let Some(slot) = self.slot_of(&limit.target) {
            let action = effective_action(limit, self.default_action, self.deny_reason.as_deref())?;
            let view = effective_view(limit, self.view_reason.as_deref())?;
            let installed = Installed { slot, limit: limit.clone(), action, view };
            self.write_rule(&installed, true)?;
            self.slots[slot as usize] = (installed.clone(), true);
            return Ok((installed, false));
        }
        // The base goes in before the rule is indexed: the first call
        // checked against it already sees what the target holds.
        let slot = self.slots.len() as u32;
        if slot < MAX_LIMITS {
            self.write_base(slot, carried).map_err(|e| match e {
                LimitError::Write { source, .. } => LimitError::Write { target: target.clone(), source },
                other => other,
            })?;
        }
        let installed = self.add(limit)?;
        self.update_in_force()?;
        Ok((installed, true))
    }

    /// LIMIT_BASE[slot]: what the target held when its limit was set and
    /// still holds.
    pub fn write_base(&mut self, slot: u32, bytes: u64) -> Result<(), LimitError> {
        self.base
            .set(slot, bytes, 0)
            .map_err(|e| LimitError::Write { target: format!("slot {slot}"), source: Box::new(e) })
    }

    /// LIMIT_BASE[slot] (0 where it cannot be read).
    pub fn base(&self, slot: u32) -> u64 {
        self.base.get(&slot, 0).unwrap_or(0)
    }

    /// Takes the rule for `target` out of force.
    pub fn clear(&mut self, target: &Target) -> Result<Installed, LimitError> {
        let Some(slot) = self.slot_of(target) else {
            return Err(LimitError::NoSuchLimit(target.to_string()));
        };
        let name = target.to_string();
        let write = |e| LimitError::Write { target: name.clone(), source: Box::new(e) };
        match self.index_key(target)? {
            IndexKey::Comm(key) => self.comms.remove(&key).map_err(write)?,
            IndexKey::Target(key) => self.index.remove(&key).map_err(write)?,
        }
        let (installed, _) = self.slots[slot as usize].clone();
        self.write_rule(&installed, false)?;
        self.slots[slot as usize].1 = false;
        self.update_in_force()?;
        Ok(installed)
    }

    /// The rules in force, with their usage.
    pub fn list(&self) -> Vec<LimitStatus> {
        self.slots
            .iter()
            .filter(|(_, active)| *active)
            .map(|(i, _)| LimitStatus {
                target: i.limit.target.to_string(),
                device: i.limit.device,
                hard: i.limit.hard,
                soft: i.limit.soft,
                action: i.action.to_string(),
                view: i.view.to_string(),
                usage: self
                    .state
                    .get(&i.slot, 0)
                    .map(|s| s.usage)
                    .unwrap_or(0)
                    .wrapping_add(self.base(i.slot)),
                source: None,
            })
            .collect()
    }

    /// The rules in force.
    pub fn installed(&self) -> Vec<Installed> {
        self.slots.iter().filter(|(_, a)| *a).map(|(i, _)| i.clone()).collect()
    }

    /// Names of every rule ever installed, by slot, for the records.
    pub fn names(&self) -> HashMap<u32, (String, Action)> {
        self.slots.iter().map(|(i, _)| (i.slot, (i.limit.target.to_string(), i.action))).collect()
    }

    /// The action of rules that name none (a reloaded file may change it).
    pub fn set_default_action(&mut self, action: Action) {
        self.default_action = action;
    }

    /// The targets of the rules in force.
    pub fn targets(&self) -> Vec<Target> {
        self.slots.iter().filter(|(_, a)| *a).map(|(i, _)| i.limit.target.clone()).collect()
    }

    fn slot_of(&self, target: &Target) -> Option<u32> {
        self.slots.iter().find(|(i, active)| *active && &i.limit.target == target).map(|(i, _)| i.slot)
    }

    /// Puts `limit` in a fresh slot and indexes it.
    fn add(&mut self, limit: &Limit) -> Result<Installed, LimitError> {
        let slot = self.slots.len() as u32;
        if slot >= MAX_LIMITS {
            return Err(LimitError::NoSlot);
        }
        let action = effective_action(limit, self.default_action, self.deny_reason.as_deref())?;
        let view = effective_view(limit, self.view_reason.as_deref())?;
        let key = self.index_key(&limit.target)?;
        let installed = Installed { slot, limit: limit.clone(), action, view };
        self.write_rule(&installed, true)?;
        let target = limit.target.to_string();
        let write = |e| LimitError::Write { target: target.clone(), source: Box::new(e) };
        match key {
            IndexKey::Comm(key) => self.comms.insert(key, slot, 0).map_err(write)?,
            IndexKey::Target(key) => self.index.insert(key, slot, 0).map_err(write)?,
        }
        self.slots.push((installed.clone(), true));
        Ok(installed)
    }

    fn write_rule(&mut self, rule: &Installed, active: bool) -> Result<(), LimitError> {
        let (slot, limit) = (rule.slot, &rule.limit);
        let (code, signal) = match rule.action {
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
            active: active as u32,
            view: match rule.view {
                View::Limit => limit_view::LIMIT,
                View::Driver => limit_view::DRIVER,
            },
            _pad: 0,
        };
        let target = limit.target.to_string();
        self.rules.set(slot, rule, 0).map_err(|e| LimitError::Write { target, source: Box::new(e) })
    }

    /// Where the kernel looks `target` up.
    fn index_key(&self, target: &Target) -> Result<IndexKey, LimitError> {
        Ok(match target {
            Target::Pid(pid) => {
                IndexKey::Target(LimitKey { scope: limit_scope::PROCESS, _pad: 0, id: *pid as u64 })
            }
            Target::Cgroup(path) => {
                let id = self.cgroup_dir(path).and_then(|d| crate::enrich::cgroup::cgroup_id(&d).ok());
                let id = id.ok_or_else(|| LimitError::NoCgroup {
                    target: target.to_string(),
                    path: path.clone(),
                    root: self
                        .cgroup_root
                        .as_ref()
                        .map_or("(no cgroup2 mount)".into(), |r| r.display().to_string()),
                })?;
                IndexKey::Target(LimitKey { scope: limit_scope::CGROUP, _pad: 0, id })
            }
            Target::Comm(comm) => IndexKey::Comm(comm_key(comm)),
        })
    }

    /// The cgroup2 mount the rules' cgroups are under.
    pub fn cgroup_root(&self) -> Option<&std::path::Path> {
        self.cgroup_root.as_deref()
    }

    fn cgroup_dir(&self, path: &str) -> Option<PathBuf> {
        cgroup_dir(self.cgroup_root.as_deref(), path)
    }

    /// The matcher of the rule in `slot` and the device it names (None for
    /// a slot never used).
    pub fn matcher_of(&self, slot: u32) -> Option<(Matcher, Option<u32>)> {
        let (i, _) = self.slots.get(slot as usize)?;
        Some((self.matcher(&i.limit.target, i.limit.device), i.limit.device))
    }

    /// What decides whether an allocation counts under a rule on `target`.
    pub fn matcher(&self, target: &Target, device: Option<u32>) -> Matcher {
        Matcher::new(target, device, self.cgroup_root.as_deref())
    }

    /// LIMITS_IN_FORCE[1]: some process holds declared limits (the kernel
    /// sets it at an exec that declares; the agent, for processes it read
    /// at start-up).
    pub fn mark_declared(&mut self) -> Result<(), LimitError> {
        self.in_force
            .set(1, 1, 0)
            .map_err(|e| LimitError::Write { target: "(declared limits)".into(), source: Box::new(e) })
    }

    /// LIMITS_IN_FORCE: the kinds of target of the rules in force (see
    /// `limits_in_force`); zero skips the limit path at every call.
    fn update_in_force(&mut self) -> Result<(), LimitError> {
        let kinds = in_force_mask(self.slots.iter().filter(|(_, a)| *a).map(|(i, _)| &i.limit.target));
        self.in_force
            .set(0, kinds, 0)
            .map_err(|e| LimitError::Write { target: "(all)".into(), source: Box::new(e) })
    }
}

/// A rule's key in the kernel: processes and cgroups in `LIMIT_INDEX`,
/// comms in `COMM_LIMITS`.
enum IndexKey {
    Target(LimitKey),
    Comm([u8; TASK_COMM_LEN]),
}

/// The `LIMITS_IN_FORCE` bits for rules on `targets`.
fn in_force_mask<'a>(targets: impl Iterator<Item = &'a Target>) -> u32 {
    targets.fold(0, |kinds, t| {
        kinds
            | match t {
                Target::Pid(_) => limits_in_force::PROCESS,
                Target::Cgroup(_) => limits_in_force::CGROUP,
                Target::Comm(_) => limits_in_force::COMM,
            }
    })
}

fn comm_key(comm: &str) -> [u8; TASK_COMM_LEN] {
    let mut key = [0u8; TASK_COMM_LEN];
    key[..comm.len()].copy_from_slice(comm.as_bytes());
    key
}

mod adopt;
#[cfg(test)]
mod tests;
