//! The kernel's limit maps: a run of `LIMITS` slots per rule (one, or one
//! and one a device for a rule that limits each device on its own),
//! indexed by process, cgroup or comm (`index.rs`, several rules a
//! target); written at start-up and changed at run time (`gpumem limit
//! set|clear`, SIGHUP, containers' declarations). The only place that
//! writes them.
use std::path::PathBuf;

use aya::maps::{Array, MapData};
use gpumem_common::{
    limit_scope, limits_in_force, map_name, LimitKey, LimitRule, LimitState, MAX_LIMITS, TASK_COMM_LEN,
};

use self::{
    index::{Head, Index, IndexError, IndexKey},
    slots::{Slot, Slots},
};

use super::{
    matcher::{cgroup_dir, Matcher},
    policy::{config::Policy, Action, Limit, Target, View},
};
use crate::bpf::{BpfError, Tracer};

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
    #[error("all {MAX_LIMITS} limit slots are in use (or count what their cleared rules held)")]
    NoSlot,
    #[error("{0} has {max} rules already (one for all devices, one per device...): clear one first", max = gpumem_common::LIMITS_PER_CALL)]
    TargetFull(String),
    #[error("{0} is not one rule: the agent makes one on each of its pods' cgroups")]
    Pods(String),
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
/// rewritten while calls are being counted. A cleared rule's slots are
/// given to another rule only once nothing counts under them any more
/// (`slots::Slots::reclaim`): allocations counted under it keep releasing
/// from it until then.
pub struct LimitTable {
    rules: Array<MapData, LimitRule>,
    state: Array<MapData, LimitState>,
    base: Array<MapData, u64>,
    index: Index,
    in_force: Array<MapData, u32>,
    cgroup_root: Option<PathBuf>,
    deny_reason: Option<String>,
    /// Why this kernel cannot answer queries with a limit's view (None: it can).
    view_reason: Option<String>,
    default_action: Action,
    slots: Slots,
    /// Each target's key as it was when its first rule was indexed (a
    /// cgroup's rules are cleared after the cgroup is gone too).
    keys: std::collections::HashMap<Target, IndexKey>,
    /// The cgroups a rule over several is indexed under (a namespace's
    /// total: its pods'), see `shared.rs`.
    members: std::collections::HashMap<Target, std::collections::BTreeSet<String>>,
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
        let mut index = Index::new(
            tracer.take_map(map_name::LIMIT_INDEX)?,
            tracer.take_map(map_name::COMM_LIMITS)?,
            tracer.take_map(map_name::LIMIT_INDEX_GENERATION)?,
        );
        index.bump().map_err(|e| LimitError::Write {
            target: "the index's generation".into(),
            source: Box::new(e),
        })?;
        Ok(Self {
            rules: tracer.take_map(map_name::LIMITS)?,
            state: tracer.take_map(map_name::LIMIT_STATE)?,
            base: tracer.take_map(map_name::LIMIT_BASE)?,
            index,
            in_force: tracer.take_map(map_name::LIMITS_IN_FORCE)?,
            cgroup_root,
            deny_reason,
            view_reason: tracer.view_refusal().map(str::to_string),
            default_action,
            slots: Slots::default(),
            keys: Default::default(),
            members: Default::default(),
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
        for limit in policy.limits.iter().filter(|l| !l.target.is_pods()) {
            out.push(self.add(self.resolve(limit, None, Origin::Operator)?, &[])?);
        }
        self.update_in_force()?;
        Ok(out)
    }

    /// The rule `limit` is on this kernel (its action and view resolved),
    /// per device where `each` gives them, from `source`; its slot not
    /// chosen yet.
    pub fn resolve(
        &self,
        limit: &Limit,
        each: Option<Vec<Option<u64>>>,
        origin: Origin,
    ) -> Result<Installed, LimitError> {
        let action = effective_action(limit, self.default_action, self.deny_reason.as_deref())?;
        let view = effective_view(limit, self.view_reason.as_deref())?;
        Ok(Installed { slot: 0, limit: limit.clone(), action, view, each, origin })
    }

    /// Sets a rule at run time: one the target has for the same devices
    /// gets the new numbers and action, its usage kept; a new one gets
    /// slots, with `carried` (what the target holds now on each of its
    /// slots, see `carried.rs`) as their bases. The bool: whether it is new.
    pub fn set(&mut self, rule: Installed, carried: &[u64]) -> Result<(Installed, bool), LimitError> {
        if let Some(slot) = self.slot_of(&rule.limit.target, rule.devices()) {
            if self.in_place(&rule) {
                let installed = Installed { slot, ..rule };
                self.write_rule(&installed, true)?;
                self.slots.take(installed.clone());
                return Ok((installed, false));
            }
            self.clear_one(slot)?;
        }
        let installed = self.add(rule, carried)?;
        self.update_in_force()?;
        Ok((installed, true))
    }

    /// Whether [`Self::set`] would rewrite a rule the target has (same
    /// devices, same slots), its usage kept: nothing new to carry.
    pub fn in_place(&self, rule: &Installed) -> bool {
        self.slot_of(&rule.limit.target, rule.devices())
            .is_some_and(|slot| rule.span() == self.slots.run(slot).len() as u32 - 1)
    }

    /// LIMIT_BASE[slot]: what the target held when its limit was set and
    /// still holds.
    pub fn write_base(&mut self, slot: u32, bytes: u64) -> Result<(), LimitError> {
        self.base
            .set(slot, bytes, 0)
            .map_err(|e| LimitError::Write { target: format!("slot {slot}"), source: Box::new(e) })
    }

    /// What the kernel counts in `slot` now, with its base.
    fn counted(&self, slot: u32) -> u64 {
        slots::counted(&self.state, &self.base, slot)
    }

    /// LIMIT_BASE[slot] (0 where it cannot be read).
    pub fn base(&self, slot: u32) -> u64 {
        self.base.get(&slot, 0).unwrap_or(0)
    }

    /// Puts `rule` in a fresh run of slots (their bases `carried` first,
    /// so the first call checked already sees them) and indexes it.
    fn add(&mut self, rule: Installed, carried: &[u64]) -> Result<Installed, LimitError> {
        let slot = self.slots.find(1 + rule.span()).ok_or(LimitError::NoSlot)?;
        let keys = self.index_keys(&rule.limit.target)?;
        let installed = Installed { slot, ..rule };
        for (s, &bytes) in (slot..).zip(carried) {
            self.write_base(s, bytes)?;
        }
        self.write_rule(&installed, true)?;
        for key in keys {
            self.index.add(key, Head::of(&installed)).map_err(|e| index_error(&installed.limit.target, e))?;
        }
        self.slots.take(installed.clone());
        Ok(installed)
    }

    /// Writes a rule's slots: its head, then (for one per device) each
    /// device's.
    fn write_rule(&mut self, rule: &Installed, active: bool) -> Result<(), LimitError> {
        let target = &rule.limit.target;
        for (slot, r) in (rule.slot..).zip(kernel_rules(rule, active)) {
            self.rules.set(slot, r, 0).map_err(|e| write_error(target, e))?;
        }
        Ok(())
    }

    fn rule_at(&self, head: u32) -> Option<&Installed> {
        match self.slots.get(head)? {
            Slot::Head { rule, .. } => Some(rule),
            _ => None,
        }
    }

    fn slot_of(&self, target: &Target, devices: Devices) -> Option<u32> {
        self.slots
            .heads()
            .find(|(r, active)| *active && &r.limit.target == target && r.devices() == devices)
            .map(|(r, _)| r.slot)
    }

    /// The action of rules that name none (a reloaded file may change it).
    pub fn set_default_action(&mut self, action: Action) {
        self.default_action = action;
    }

    /// Where the kernel looks `target`'s rules up: its key, or a shared
    /// rule's members' (each remembered, so that a cgroup gone is still
    /// found).
    fn index_keys(&mut self, target: &Target) -> Result<Vec<IndexKey>, LimitError> {
        let targets: Vec<Target> = match (target, self.members.get(target)) {
            (Target::NamespaceTotal(_), Some(m)) => m.iter().map(|p| Target::Cgroup(p.clone())).collect(),
            (Target::NamespaceTotal(_), None) => Vec::new(),
            (t, _) => vec![t.clone()],
        };
        let mut keys = Vec::new();
        for t in targets {
            let key = self.index_key(&t)?;
            self.keys.insert(t, key);
            keys.push(key);
        }
        Ok(keys)
    }

    /// Where the kernel looks `target` up.
    fn index_key(&self, target: &Target) -> Result<IndexKey, LimitError> {
        if let Some(&key) = self.keys.get(target) {
            return Ok(key);
        }
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
            Target::Namespace(_) | Target::NamespaceTotal(_) | Target::Pod(_) => {
                return Err(LimitError::Pods(target.to_string()))
            }
        })
    }

    /// The cgroup2 mount the rules' cgroups are under.
    pub fn cgroup_root(&self) -> Option<&std::path::Path> {
        self.cgroup_root.as_deref()
    }

    fn cgroup_dir(&self, path: &str) -> Option<PathBuf> {
        cgroup_dir(self.cgroup_root.as_deref(), path)
    }

    /// What decides whether an allocation counts under a rule on `target`.
    pub fn matcher(&self, target: &Target, device: Option<u32>) -> Matcher {
        match self.members.get(target) {
            Some(paths) => Matcher::of_cgroups(paths.iter(), device, self.cgroup_root.as_deref()),
            None => Matcher::new(target, device, self.cgroup_root.as_deref()),
        }
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
        let kinds = in_force_mask(self.slots.heads().filter(|(_, a)| *a).map(|(i, _)| &i.limit.target));
        self.in_force
            .set(0, kinds, 0)
            .map_err(|e| LimitError::Write { target: "(all)".into(), source: Box::new(e) })
    }
}

fn write_error(target: &Target, e: aya::maps::MapError) -> LimitError {
    LimitError::Write { target: target.to_string(), source: Box::new(e) }
}

fn index_error(target: &Target, e: IndexError) -> LimitError {
    match e {
        IndexError::Full => LimitError::TargetFull(target.to_string()),
        IndexError::Map(e) => write_error(target, e),
    }
}

/// The `LIMITS_IN_FORCE` bits for rules on `targets`.
fn in_force_mask<'a>(targets: impl Iterator<Item = &'a Target>) -> u32 {
    targets.fold(0, |kinds, t| {
        kinds
            | match t {
                Target::Pid(_) => limits_in_force::PROCESS,
                Target::Cgroup(_) => limits_in_force::CGROUP,
                Target::Comm(_) => limits_in_force::COMM,
                Target::NamespaceTotal(_) => limits_in_force::CGROUP,
                Target::Namespace(_) | Target::Pod(_) => 0,
            }
    })
}

fn comm_key(comm: &str) -> [u8; TASK_COMM_LEN] {
    let mut key = [0u8; TASK_COMM_LEN];
    key[..comm.len()].copy_from_slice(comm.as_bytes());
    key
}

mod index;
mod installed;
mod list;
mod rules;
mod slots;

pub use installed::{Devices, Installed, Origin};
pub use rules::kernel_rules;
mod adopt;
mod clear;
mod shared;
#[cfg(test)]
mod tests;
