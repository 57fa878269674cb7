//! A rule over several cgroups: one count, indexed under each (a
//! namespace's total over its pods' cgroups, `per=namespace`). Its
//! members change as pods come and go.
use std::collections::BTreeSet;

use super::{index::Head, index_error, write_error, LimitError, LimitTable};
use crate::limits::policy::Target;

impl LimitTable {
    /// The cgroups `target`'s rules are indexed under from now on (its
    /// rules, if any, indexed under those added and taken out of those
    /// gone); the cgroups added.
    pub fn set_members(
        &mut self,
        target: &Target,
        paths: BTreeSet<String>,
    ) -> Result<Vec<String>, LimitError> {
        let before = self.members.get(target).cloned().unwrap_or_default();
        let added: Vec<String> = paths.difference(&before).cloned().collect();
        let gone: Vec<String> = before.difference(&paths).cloned().collect();
        let heads: Vec<Head> = self
            .slots
            .heads()
            .filter(|(r, a)| *a && &r.limit.target == target)
            .map(|(r, _)| Head::of(r))
            .collect();
        let slots: Vec<u32> = heads.iter().map(|h| h.slot).collect();
        for path in &gone {
            let cgroup = Target::Cgroup(path.clone());
            if let Some(&key) = self.keys.get(&cgroup) {
                self.index.take(key, &slots).map_err(|e| write_error(target, e))?;
            }
        }
        self.members.insert(target.clone(), paths);
        for path in &added {
            let cgroup = Target::Cgroup(path.clone());
            let key = self.index_key(&cgroup)?;
            self.keys.insert(cgroup, key);
            for &h in &heads {
                self.index.add(key, h).map_err(|e| index_error(target, e))?;
            }
        }
        Ok(added)
    }

    /// Forgets `target`'s members (its rules cleared).
    pub fn forget_members(&mut self, target: &Target) {
        self.members.remove(target);
    }
}
