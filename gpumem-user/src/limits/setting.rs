//! Setting a rule at run time (`gpumem limit set`, SIGHUP, a container's
//! declaration): what its target holds as it is set is carried in its
//! base (`carried.rs`). What is held is read from the kernel's live
//! allocations, not the ledger: the ledger lags by the records not yet
//! read, and a container's processes allocate right after the exec whose
//! record makes its rule.
use super::{
    carried::Entry,
    counting_slots,
    held::Held,
    policy::{Limit, Target},
    table::{Installed, LimitError, Origin},
    Limits,
};
use crate::ledger::LiveAllocation;

impl Limits {
    /// Sets a limit at run time (see `LimitTable::set`); a new target's
    /// live allocations (as `read` reads them) are carried in its base
    /// until freed.
    pub fn set<'a>(&mut self, limit: &Limit, read: &dyn Fn() -> Held<'a>) -> Result<Installed, LimitError> {
        if limit.target.is_pods() {
            return self.set_pod_rule(limit, read);
        }
        let rule = self.table.resolve(limit, None, Origin::Operator)?;
        self.set_rule(rule, read)
    }

    /// [`Self::set`] for a rule already resolved (a container's, made of
    /// a declaration, may limit each device on its own). What is held is
    /// read twice: before the rule is written, so that its first call
    /// already sees the base; after, for the calls that completed in
    /// between, neither counted under it nor carried. (A call admitted
    /// before the write and returning after the second read is neither:
    /// microseconds.)
    pub(super) fn set_rule<'a>(
        &mut self,
        rule: Installed,
        read: &dyn Fn() -> Held<'a>,
    ) -> Result<Installed, LimitError> {
        // A rule rewritten in place keeps its count: nothing to read.
        let before = if self.table.in_place(&rule) { Held::of(Vec::new()) } else { read() };
        // What each of its slots would carry, in the order of its run.
        let mut carried: Vec<(u32, Vec<Entry>)> = vec![(0, Vec::new()); 1 + rule.span() as usize];
        for (slot, device) in counting_slots(&rule) {
            let at = (slot - rule.slot) as usize;
            carried[at] = (at as u32, self.covered(&rule.limit.target, device, &before.live, |_| true));
        }
        let totals: Vec<u64> = carried.iter().map(|(_, e)| e.iter().map(|e| e.2).sum()).collect();
        let (installed, new) = self.table.set(rule, &totals)?;
        if new {
            for (at, entries) in carried {
                self.carried.carry(installed.slot + at, &entries);
            }
            self.carried.await_records(&before.unseen);
            self.carry_missed(&installed, &read());
        }
        self.names = self.table.names();
        Ok(installed)
    }

    /// What `installed`'s target held at `after` (read once its rule was
    /// written) that is neither charged under it nor carried: added to its
    /// bases.
    pub(super) fn carry_missed(&mut self, installed: &Installed, after: &Held<'_>) {
        for (slot, device) in counting_slots(installed) {
            let missed = self.covered(&installed.limit.target, device, &after.live, |a| {
                !after.charged.contains(&(slot, a.tgid, a.key)) && !self.carried.holds(slot, a.tgid, a.key)
            });
            if missed.is_empty() {
                continue;
            }
            let base = self.carried.carry(slot, &missed);
            if let Err(e) = self.table.write_base(slot, base) {
                tracing::warn!("{}", crate::chain(&e));
            }
        }
        self.carried.await_records(&after.unseen);
    }

    /// The allocations among `live` that `target` holds (on `device`, if
    /// given; and that `also` keeps), as carried entries.
    pub(super) fn covered(
        &self,
        target: &Target,
        device: Option<u32>,
        live: &[LiveAllocation<'_>],
        also: impl Fn(&LiveAllocation<'_>) -> bool,
    ) -> Vec<Entry> {
        let m = self.table.matcher(target, device);
        live.iter()
            .filter(|a| m.covers(a.tgid, a.comm, a.cgroup_id, a.device) && also(a))
            .map(|a| (a.tgid, a.key, a.size))
            .collect()
    }
}
