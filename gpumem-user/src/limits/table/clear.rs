//! Taking rules out of force, and giving their slots to other rules once
//! nothing counts under them.
use std::time::Instant;

use super::{
    slots::{counted, Slot},
    write_error, Devices, Installed, LimitError, LimitTable,
};
use crate::limits::policy::Target;

impl LimitTable {
    /// Takes every rule on `target` out of force; they were.
    pub fn clear(&mut self, target: &Target) -> Result<Vec<Installed>, LimitError> {
        let heads: Vec<u32> = self
            .slots
            .heads()
            .filter(|(r, a)| *a && &r.limit.target == target)
            .map(|(r, _)| r.slot)
            .collect();
        for key in self.index_keys(target)? {
            self.index.take(key, &heads).map_err(|e| write_error(target, e))?;
        }
        let mut cleared = Vec::new();
        for head in heads {
            cleared.extend(self.rule_at(head).cloned());
            self.deactivate(head)?;
        }
        self.update_in_force()?;
        if cleared.is_empty() {
            return Err(LimitError::NoSuchLimit(target.to_string()));
        }
        Ok(cleared)
    }

    /// Takes the rule on `target` for `devices` out of force (the
    /// target's others stay); it, if there was one.
    pub fn clear_rule(&mut self, target: &Target, devices: Devices) -> Result<Option<Installed>, LimitError> {
        let Some(head) = self.slot_of(target, devices) else { return Ok(None) };
        let rule = self.rule_at(head).cloned();
        self.clear_one(head)?;
        self.update_in_force()?;
        Ok(rule)
    }

    /// Takes the one rule headed at `head` out of force (the target's
    /// others stay).
    pub(super) fn clear_one(&mut self, head: u32) -> Result<(), LimitError> {
        let Some(rule) = self.rule_at(head).cloned() else { return Ok(()) };
        for key in self.index_keys(&rule.limit.target)? {
            self.index.take(key, &[head]).map_err(|e| write_error(&rule.limit.target, e))?;
        }
        self.deactivate(head)
    }

    pub(super) fn deactivate(&mut self, head: u32) -> Result<(), LimitError> {
        let Some(rule) = self.rule_at(head).cloned() else { return Ok(()) };
        self.write_rule(&rule, false)?;
        if let Some(Slot::Head { active, idle, .. }) = self.slots.get_mut(head) {
            (*active, *idle) = (false, None);
        }
        Ok(())
    }

    /// The health step's part: frees the slots of cleared rules that have
    /// counted nothing for a while (their bases written 0 first). Only
    /// those rules' slots are read from the kernel (two lookups a slot):
    /// reading every slot, 4,092 system calls a second, was 60% of an idle
    /// agent's time.
    pub fn reclaim(&mut self) {
        let (state, base) = (&self.state, &self.base);
        let counts = |s: u32| counted(state, base, s);
        for head in self.slots.reclaim(Instant::now(), counts) {
            tracing::debug!("limit slot {head} and its devices' free for another rule");
        }
    }
}
