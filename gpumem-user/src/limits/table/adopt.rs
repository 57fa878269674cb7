//! Reading back the rules an earlier agent of the same build left in the
//! kernel's limit maps (`gpumem run --persist`): the kernel went on
//! enforcing them and counting under them; the new agent takes them over
//! with their usage, slot for slot.
use std::collections::HashMap;

use gpumem_common::{limit_action, limit_scope, limit_view, LimitRule, DEVICE_ANY, MAX_LIMITS};

use super::{Installed, LimitError, LimitTable};
use crate::{
    enrich::cgroup::CgroupResolver,
    limits::policy::{Action, Limit, Target, View},
};

impl LimitTable {
    /// Takes over the rules in the kernel's maps: each slot's rule, named by
    /// the target its index entry points at. A cleared slot (or one whose
    /// cgroup is gone) stays out of force and keeps releasing what was
    /// counted under it.
    pub fn adopt(&mut self) -> Result<(), LimitError> {
        let mut targets = self.indexed_targets();
        let rules: Vec<LimitRule> =
            (0..MAX_LIMITS).map(|s| self.rules.get(&s, 0).unwrap_or_default()).collect();
        let used = rules.iter().rposition(|r| *r != LimitRule::default()).map_or(0, |s| s + 1);
        for (slot, rule) in (0..).zip(&rules[..used]) {
            let target = targets.remove(&slot);
            let active = rule.active != 0 && target.is_some();
            let target = target.unwrap_or_else(|| Target::Comm(format!("(cleared slot {slot})")));
            self.slots.push((installed(slot, target, rule), active));
        }
        self.update_in_force()
    }

    /// Which target each indexed slot limits.
    fn indexed_targets(&self) -> HashMap<u32, Target> {
        let mut cgroups = CgroupResolver::with_root(self.cgroup_root.clone());
        let mut targets = HashMap::new();
        for (key, slot) in self.index.iter().flatten() {
            let target = match key.scope {
                limit_scope::PROCESS => Some(Target::Pid(key.id as u32)),
                limit_scope::CGROUP => cgroups.path(key.id).map(|p| Target::Cgroup(p.to_string())),
                _ => None,
            };
            if let Some(t) = target {
                targets.insert(slot, t);
            }
        }
        for (comm, slot) in self.comms.iter().flatten() {
            let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
            targets.insert(slot, Target::Comm(String::from_utf8_lossy(&comm[..len]).into_owned()));
        }
        targets
    }
}

/// The rule in `slot` as the agent names it.
fn installed(slot: u32, target: Target, rule: &LimitRule) -> Installed {
    let action = match rule.action {
        limit_action::SIGNAL => Action::Signal(rule.signal as i32),
        limit_action::DENY => Action::Deny,
        _ => Action::Audit,
    };
    let view = if rule.view == limit_view::LIMIT { View::Limit } else { View::Driver };
    let limit = Limit {
        target,
        hard: rule.hard,
        soft: (rule.soft != 0).then_some(rule.soft),
        action: Some(action),
        fallback: None,
        device: (rule.device != DEVICE_ANY).then_some(rule.device),
        view: Some(view),
    };
    Installed { slot, limit, action, view }
}
