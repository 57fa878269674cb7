//! Rules over all pods of a namespace on this node (`per=namespace`):
//! one count, indexed under each pod's cgroup (`table/shared.rs`), its
//! pods following the pods' step.
use super::{
    held::Held,
    pods::{self, Pod},
    policy::Target,
    table::Origin,
    Limits,
};

impl Limits {
    /// Makes, rewrites or clears the rules over namespaces' pods, and
    /// keeps each one's pods: a pod that joins brings what it holds into
    /// the count (carried), one gone takes its memory with it as it
    /// frees it.
    pub(super) fn sync_totals<'a>(&mut self, pods: &[Pod], read: &dyn Fn() -> Held<'a>) {
        let wanted = pods::totals(&self.pods.templates, pods);
        let gone: Vec<(String, Option<u32>)> =
            self.pods.totals.keys().filter(|k| !wanted.contains_key(*k)).cloned().collect();
        for key in gone {
            if let Some(limit) = self.pods.totals.remove(&key) {
                self.clear_total(&limit.target, key.1);
            }
        }
        for (key, (limit, members)) in wanted {
            let target = limit.target.clone();
            let added = match self.table.set_members(&target, members) {
                Ok(added) => added,
                Err(e) => {
                    tracing::warn!("{target}: {}", crate::chain(&e));
                    continue;
                }
            };
            if self.pods.totals.get(&key) != Some(&limit) {
                let set =
                    self.table.resolve(&limit, None, Origin::Operator).and_then(|r| self.set_rule(r, read));
                match set {
                    Ok(i) => {
                        tracing::info!("{}", super::describe("limit", &i));
                        self.pods.totals.insert(key, limit);
                    }
                    Err(e) => tracing::warn!("{target}: {}", crate::chain(&e)),
                }
            } else if !added.is_empty() {
                self.carry_joined(&target, key.1, read);
            }
        }
    }

    /// What pods that joined a namespace's total hold, carried in it.
    fn carry_joined<'a>(&mut self, target: &Target, device: Option<u32>, read: &dyn Fn() -> Held<'a>) {
        let rule = self
            .table
            .installed()
            .into_iter()
            .find(|i| &i.limit.target == target && i.limit.device == device);
        if let Some(i) = rule {
            self.carry_missed(&i, &read());
        }
    }

    /// Takes a namespace's total for `device` out of force.
    fn clear_total(&mut self, target: &Target, device: Option<u32>) {
        let devices = device.map_or(super::table::Devices::All, super::table::Devices::One);
        let cleared = self.table.clear_rule(target, devices);
        if let Err(e) = cleared.and_then(|i| i.map_or(Ok(()), |i| self.forget_slots(&i))) {
            tracing::warn!("{}", crate::chain(&e));
        }
        if !self.table.installed().iter().any(|i| &i.limit.target == target) {
            self.table.forget_members(target);
        }
        self.names = self.table.names();
        tracing::info!("limit cleared on {target}");
    }
}
