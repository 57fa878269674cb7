//! Reading back the rules an earlier agent of the same build left in the
//! kernel's limit maps (`gpumem run --persist`): the kernel went on
//! enforcing them and counting under them; the new agent takes them over
//! with their usage, slot for slot.
use std::collections::HashMap;

use gpumem_common::{limit_action, limit_scope, limit_view, LimitRule, DEVICE_ANY, DEVICE_EACH, MAX_LIMITS};

use super::{
    index::{Head, IndexKey},
    installed::{Devices, Origin},
    Installed, LimitError, LimitTable,
};
use crate::{
    enrich::cgroup::CgroupResolver,
    limits::policy::{Action, Limit, Target, View},
};

impl LimitTable {
    /// Takes over the rules in the kernel's maps: each rule (and a rule per
    /// device with its devices' slots), named by the target its index entry
    /// points at. A cleared rule (or one whose cgroup is gone) stays out of
    /// force and keeps releasing what was counted under it.
    pub fn adopt(&mut self) -> Result<(), LimitError> {
        let rules: Vec<LimitRule> =
            (0..MAX_LIMITS).map(|s| self.rules.get(&s, 0).unwrap_or_default()).collect();
        let mut targets = self.indexed_targets(&rules);
        let mut slot = 0;
        while (slot as usize) < rules.len() {
            let rule = &rules[slot as usize];
            if *rule == LimitRule::default() {
                slot += 1;
                continue;
            }
            let span = span(rule, slot);
            let devices = &rules[slot as usize + 1..(slot + 1 + span) as usize];
            let target = targets.remove(&slot);
            let active = rule.active != 0 && target.is_some();
            let target = target.unwrap_or_else(|| Target::Comm(format!("(cleared slot {slot})")));
            self.slots.put(installed(slot, target, rule, devices), active);
            slot += 1 + span;
        }
        self.update_in_force()
    }

    /// Which target each indexed rule (by its first slot) limits.
    fn indexed_targets(&mut self, rules: &[LimitRule]) -> HashMap<u32, Target> {
        let mut cgroups = CgroupResolver::with_root(self.cgroup_root.clone());
        let mut seen: HashMap<u32, Vec<Target>> = HashMap::new();
        let head = |slot: u32| {
            let rule = rules.get(slot as usize)?;
            let devices = match rule.device {
                DEVICE_ANY => Devices::All,
                DEVICE_EACH => Devices::Each,
                d => Devices::One(d),
            };
            Some(Head { slot, devices, span: span(rule, slot) })
        };
        for (key, heads) in self.index.read_back(head) {
            let target = match key {
                IndexKey::Target(k) if k.scope == limit_scope::PROCESS => Some(Target::Pid(k.id as u32)),
                IndexKey::Target(k) if k.scope == limit_scope::CGROUP => {
                    cgroups.path(k.id).map(|p| Target::Cgroup(p.to_string()))
                }
                IndexKey::Target(_) => None,
                IndexKey::Comm(comm) => {
                    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
                    Some(Target::Comm(String::from_utf8_lossy(&comm[..len]).into_owned()))
                }
            };
            for head in heads {
                if let Some(t) = &target {
                    seen.entry(head).or_default().push(t.clone());
                }
            }
        }
        // A rule indexed under several cgroups is one over several
        // (a namespace's total): which namespace, the kernel does not
        // keep; it is named by its slot, and enforced over the same
        // cgroups until a policy says otherwise.
        let mut targets = HashMap::new();
        for (head, mut found) in seen {
            let target = match found.len() {
                1 => found.remove(0),
                _ => {
                    let total = Target::NamespaceTotal(format!("(adopted slot {head})"));
                    let paths = found.into_iter().filter_map(|t| match t {
                        Target::Cgroup(p) => Some(p),
                        _ => None,
                    });
                    self.members.insert(total.clone(), paths.collect());
                    total
                }
            };
            targets.insert(head, target);
        }
        targets
    }
}

/// How many devices' slots follow the rule in `slot`.
fn span(rule: &LimitRule, slot: u32) -> u32 {
    if rule.device == DEVICE_EACH {
        rule.span.min(MAX_LIMITS - 1 - slot)
    } else {
        0
    }
}

/// The rule in `slot` (with its devices' rules after it, for a rule per
/// device) as the agent names it.
fn installed(slot: u32, target: Target, rule: &LimitRule, devices: &[LimitRule]) -> Installed {
    let action = match rule.action {
        limit_action::SIGNAL => Action::Signal(rule.signal as i32),
        limit_action::DENY => Action::Deny,
        _ => Action::Audit,
    };
    let view = if rule.view == limit_view::LIMIT { View::Limit } else { View::Driver };
    let each = (rule.device == DEVICE_EACH)
        .then(|| devices.iter().map(|d| (d.active != 0).then_some(d.hard)).collect::<Vec<_>>());
    let hard = each.as_ref().map_or(rule.hard, |e| e.iter().flatten().copied().max().unwrap_or(0));
    let limit = Limit {
        target,
        hard,
        soft: (rule.soft != 0).then_some(rule.soft),
        action: Some(action),
        fallback: None,
        device: (rule.device != DEVICE_ANY && rule.device != DEVICE_EACH).then_some(rule.device),
        view: Some(view),
    };
    Installed { slot, limit, action, view, each, origin: Origin::Operator }
}
