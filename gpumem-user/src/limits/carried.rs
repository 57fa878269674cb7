//! Memory a target already held when a limit on it was set at run time.
//! The kernel counts under a limit only the calls it admitted after the
//! limit existed; what the target held before is carried in the limit's
//! base (`LIMIT_BASE`, written by the agent), and leaves it as the agent
//! sees those allocations freed or their process exit. Pure bookkeeping:
//! the agent writes the totals this returns.
use std::collections::{HashMap, HashSet};

use gpumem_common::{limit_list, LiveAlloc, LiveKey, LIMITS_PER_CALL};

/// An allocation: (tgid, (namespace, address)) and its size.
pub type Entry = (u32, (u32, u64), u64);

/// Carried allocations by process, then by (namespace, address): sizes.
type ByProcess = HashMap<u32, HashMap<(u32, u64), u64>>;

#[derive(Debug, Default)]
pub struct Carried {
    /// By limit slot: the allocations carried, by process.
    slots: HashMap<u32, ByProcess>,
    /// Carried allocations read from the kernel before the agent read
    /// their `alloc` record: that record, when it comes, is theirs, and
    /// replaces nothing.
    unseen: HashSet<(u32, (u32, u64))>,
}

impl Carried {
    /// Starts carrying `entries` under `slot`; returns the base.
    pub fn carry(&mut self, slot: u32, entries: &[Entry]) -> u64 {
        let procs = self.slots.entry(slot).or_default();
        for &(tgid, key, size) in entries {
            procs.entry(tgid).or_default().insert(key, size);
        }
        total(procs)
    }

    /// Whether `slot` carries allocation `key` of process `tgid`.
    pub fn holds(&self, slot: u32, tgid: u32, key: (u32, u64)) -> bool {
        self.slots.get(&slot).and_then(|p| p.get(&tgid)).is_some_and(|m| m.contains_key(&key))
    }

    /// Of `unseen` (allocations whose `alloc` record is still to come),
    /// those carried: their record is not to take them for replaced.
    pub fn await_records(&mut self, unseen: &HashSet<(u32, (u32, u64))>) {
        for &(tgid, key) in unseen {
            if self.slots.values().any(|p| p.get(&tgid).is_some_and(|m| m.contains_key(&key))) {
                self.unseen.insert((tgid, key));
            }
        }
    }

    /// An allocation's record: one carried before its record was read
    /// changes nothing; any other at a carried address replaces one whose
    /// free was never seen, as the kernel treats it.
    pub fn allocated(&mut self, tgid: u32, key: (u32, u64)) -> Vec<(u32, u64)> {
        if self.is_empty() {
            return Vec::new(); // as in `freed`: no SipHash of the key at every record
        }
        if self.unseen.remove(&(tgid, key)) {
            return Vec::new();
        }
        self.freed(tgid, key)
    }

    /// An allocation freed (or replaced at its address): the new base of
    /// every slot that carried it.
    pub fn freed(&mut self, tgid: u32, key: (u32, u64)) -> Vec<(u32, u64)> {
        if self.is_empty() {
            return Vec::new(); // no limit carries anything: every record's case
        }
        self.unseen.remove(&(tgid, key));
        self.update(|procs| procs.get_mut(&tgid).and_then(|m| m.remove(&key)).is_some())
    }

    /// A process exited or exec'd: the new base of every slot that carried
    /// some of it.
    pub fn exited(&mut self, tgid: u32) -> Vec<(u32, u64)> {
        if self.is_empty() {
            return Vec::new();
        }
        self.unseen.retain(|&(t, _)| t != tgid);
        self.update(|procs| procs.remove(&tgid).is_some())
    }

    /// Whether nothing is carried, nor awaited.
    fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.unseen.is_empty()
    }

    /// Forgets a slot (its limit was cleared).
    pub fn drop_slot(&mut self, slot: u32) {
        self.slots.remove(&slot);
    }

    fn update(
        &mut self,
        mut change: impl FnMut(&mut HashMap<u32, HashMap<(u32, u64), u64>>) -> bool,
    ) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        for (&slot, procs) in &mut self.slots {
            if change(procs) {
                procs.retain(|_, m| !m.is_empty());
                out.push((slot, total(procs)));
            }
        }
        self.slots.retain(|_, p| !p.is_empty());
        out
    }
}

/// Which live allocations (the kernel's) are charged under which limit
/// slot: (slot, tgid, (namespace, address)). The kernel charges every
/// allocation it admitted while a rule existed under that rule's slot
/// (`LiveAlloc::limit_slots`, see `gpumem_common::limit_list`; the
/// process's own declared limits beside them are no rule's); what a rule's
/// target holds and is not charged under it is what the rule carries.
pub fn charged(held: &[(LiveKey, LiveAlloc)]) -> HashSet<(u32, u32, (u32, u64))> {
    held.iter()
        .flat_map(|(k, a)| {
            let slots = (0..LIMITS_PER_CALL).filter_map(|i| limit_list::at(a.limit_slots, i));
            slots.map(move |slot| (slot, k.tgid, k.as_recorded(a)))
        })
        .collect()
}

fn total(procs: &ByProcess) -> u64 {
    procs.values().flat_map(|m| m.values()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charged_lists_each_slot_an_allocation_counts_under() {
        let live = |tgid, addr, limit_slots| {
            (LiveKey { tgid, ns: 0, addr }, LiveAlloc { size: 1, limit_slots, ..LiveAlloc::default() })
        };
        // The third is also reserved under its process's declared limits.
        let two = limit_list::push(limit_list::push(0, Some(3)), Some(0));
        let declared =
            limit_list::with_declared(limit_list::push(0, Some(2)), limit_list::DECLARED_TOTAL_BIT, 1);
        let held = [live(10, 0x1000, 0), live(10, 0x2000, two), live(11, 0x1000, declared)];
        let found = charged(&held);
        let want: HashSet<_> = [(0, 10, (0, 0x2000)), (3, 10, (0, 0x2000)), (2, 11, (0, 0x1000))].into();
        assert_eq!(found, want);
    }

    /// A host pool's allocation: the kernel keys it as a device pointer,
    /// its records as host memory; listed as its records name it.
    #[test]
    fn charged_names_an_allocation_as_its_records_do() {
        use gpumem_common::{kind, ns};
        let key = LiveKey { tgid: 10, ns: ns::DEVICE_PTR, addr: 0x6000 };
        let a = LiveAlloc {
            size: 1,
            kind: kind::HOST,
            limit_slots: limit_list::push(0, Some(4)),
            ..LiveAlloc::default()
        };
        assert_eq!(charged(&[(key, a)]), [(4, 10, (ns::HOST_PTR, 0x6000))].into());
    }

    #[test]
    fn the_base_falls_as_carried_memory_is_freed_or_its_process_exits() {
        let mut c = Carried::default();
        assert_eq!(c.carry(3, &[(10, (0, 0x1000), 100), (10, (0, 0x2000), 50), (11, (0, 0x1000), 7)]), 157);
        assert_eq!(c.freed(10, (0, 0x2000)), [(3, 107)]);
        assert!(c.freed(10, (0, 0x2000)).is_empty(), "freed once");
        assert!(c.freed(12, (0, 0x1000)).is_empty(), "another process's address");
        assert!(c.freed(10, (1, 0x1000)).is_empty(), "another namespace");
        assert_eq!(c.exited(11), [(3, 100)]);
        assert_eq!(c.exited(10), [(3, 0)]);
        assert!(c.exited(10).is_empty());
        assert_eq!(c.carry(4, &[]), 0);
        c.drop_slot(4);
        assert!(c.freed(10, (0, 0x1000)).is_empty());
    }

    #[test]
    fn an_allocation_carried_before_its_record_is_read_is_not_replaced_by_it() {
        let mut c = Carried::default();
        c.carry(3, &[(10, (0, 0x1000), 100), (10, (0, 0x2000), 50)]);
        // Read from the kernel: 0x1000's record is still to come; 0x3000
        // is not carried, so nothing awaits it.
        c.await_records(&[(10, (0, 0x1000)), (10, (0, 0x3000))].into());
        assert!(c.allocated(10, (0, 0x1000)).is_empty(), "its own record");
        assert!(c.holds(3, 10, (0, 0x1000)));
        assert_eq!(c.allocated(10, (0, 0x1000)), [(3, 50)], "a later one at its address replaces it");
        assert_eq!(c.allocated(10, (0, 0x2000)), [(3, 0)], "seen already: replaced");
        c.carry(3, &[(11, (0, 0x1000), 8)]);
        c.await_records(&[(11, (0, 0x1000))].into());
        assert_eq!(c.exited(11), [(3, 0)]);
        c.carry(3, &[(11, (0, 0x1000), 8)]);
        assert_eq!(c.allocated(11, (0, 0x1000)), [(3, 0)], "the exit took what awaited its record");
    }
}
