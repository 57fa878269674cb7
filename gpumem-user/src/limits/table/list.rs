//! What the table says of its rules: the list `gpumem limit list` shows,
//! the names decision records give each slot, and which allocations a
//! slot's rule covers.
use std::collections::HashMap;

use super::{
    installed::{Installed, Origin},
    slots::Slot,
    LimitTable,
};
use crate::{
    limits::{
        matcher::Matcher,
        policy::{Action, Target},
    },
    output::LimitStatus,
};

impl LimitTable {
    /// The rules in force.
    pub fn installed(&self) -> Vec<Installed> {
        self.slots.heads().filter(|(_, a)| *a).map(|(i, _)| i.clone()).collect()
    }

    /// The targets of the operator's rules in force, each once (not those
    /// made of containers' declarations).
    pub fn targets(&self) -> Vec<Target> {
        let mut out: Vec<Target> = Vec::new();
        for (i, _) in self.slots.heads().filter(|(i, a)| *a && i.origin == Origin::Operator) {
            if !out.contains(&i.limit.target) {
                out.push(i.limit.target.clone());
            }
        }
        out
    }

    /// How many of the operator's rules in force are on cgroup `path` or
    /// one above it (each of them applies to the processes under `path`).
    pub fn operator_rules_over(&self, path: &str) -> usize {
        let over = |p: &str| path == p || p == "/" || path.starts_with(&format!("{p}/"));
        self.slots
            .heads()
            .filter(|(i, active)| *active && !matches!(i.origin, Origin::Declared(_)))
            .filter(|(i, _)| match &i.limit.target {
                Target::Cgroup(p) => over(p),
                t @ Target::NamespaceTotal(_) => {
                    self.members.get(t).is_some_and(|m| m.iter().any(|p| over(p)))
                }
                _ => false,
            })
            .count()
    }

    /// The rules in force, with their usage: a line a rule, or a line a
    /// limited device for a rule per device.
    pub fn list(&self) -> Vec<LimitStatus> {
        let mut out = Vec::new();
        for (i, _) in self.slots.heads().filter(|(_, active)| *active) {
            let line = |slot: u32, device: Option<u32>, hard: u64, soft: Option<u64>| LimitStatus {
                target: i.limit.target.to_string(),
                device,
                hard,
                soft,
                action: i.action.to_string(),
                view: i.view.to_string(),
                usage: self.counted(slot),
                source: i.origin.label(),
            };
            match &i.each {
                None => out.push(line(i.slot, i.limit.device, i.limit.hard, i.limit.soft)),
                Some(each) => out.extend(
                    (0..).zip(each).filter_map(|(d, h)| h.map(|h| line(i.slot + 1 + d, Some(d), h, None))),
                ),
            }
        }
        out
    }

    /// Names of every rule's slots, for the records: the target (with the
    /// device, for a device's slot of a rule per device) and the action.
    pub fn names(&self) -> HashMap<u32, (String, Action)> {
        let mut out = HashMap::new();
        for (i, _) in self.slots.heads() {
            out.insert(i.slot, (i.limit.target.to_string(), i.action));
            for d in 0..i.span() {
                out.insert(i.slot + 1 + d, (format!("{} (device {d})", i.limit.target), i.action));
            }
        }
        out
    }

    /// The rule counting in `slot` and the device it counts (None: all).
    fn counting_in(&self, slot: u32) -> Option<(&Installed, Option<u32>)> {
        match self.slots.get(slot)? {
            Slot::Head { rule, .. } => Some((rule, rule.limit.device)),
            &Slot::Device { head, device } => match self.slots.get(head)? {
                Slot::Head { rule, .. } => Some((rule, Some(device))),
                _ => None,
            },
            Slot::Free => None,
        }
    }

    /// The matcher of the rule counting in `slot` and the device it
    /// counts (None for a free slot).
    pub fn matcher_of(&self, slot: u32) -> Option<(Matcher, Option<u32>)> {
        let (rule, device) = self.counting_in(slot)?;
        Some((self.matcher(&rule.limit.target, device), device))
    }

    /// Where the rule counting in `slot` came from, where not the
    /// operator's rules.
    pub fn source_of(&self, slot: u32) -> Option<String> {
        self.counting_in(slot)?.0.origin.label()
    }
}
