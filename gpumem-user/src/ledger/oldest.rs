//! The oldest live allocations of a process: what it has held longest
//! (leaks show here first), for `gpumem top`. Pure logic, read only.
use super::{Ledger, LiveAllocation};

impl Ledger {
    /// The `n` oldest live allocations of process `tgid`, oldest first
    /// (ties: the lower namespace and address first); empty for a process
    /// the ledger does not hold.
    pub fn oldest(&self, tgid: u32, n: usize) -> Vec<LiveAllocation<'_>> {
        let Some(p) = self.procs.get(&tgid) else { return Vec::new() };
        let mut all: Vec<LiveAllocation<'_>> =
            p.live.iter().map(|(&key, l)| l.listed(tgid, &p.comm, key)).collect();
        let order = |a: &LiveAllocation<'_>| (a.ts_ns, a.key);
        if all.len() > n {
            // Only the n oldest need sorting.
            all.select_nth_unstable_by_key(n, order);
            all.truncate(n);
        }
        all.sort_unstable_by_key(order);
        all
    }
}

#[cfg(test)]
mod tests {
    use gpumem_common::kind;

    use crate::{
        decode::{Body, Change, Event, Origin},
        ledger::Ledger,
    };

    fn alloc(tgid: u32, ts_ns: u64, addr: u64, size: u64, api: u32) -> Event {
        let origin = Origin { ts_ns, pid: tgid, tid: tgid, cgroup_id: 7, comm: "trainer".into(), api };
        let c = Change { addr, size, kind: kind::DEVICE, device: Some(1), ..Change::default() };
        Event { origin, body: Body::Alloc(c) }
    }

    fn free(tgid: u32, addr: u64, size: u64) -> Event {
        let mut e = alloc(tgid, 0, addr, size, 0);
        if let Body::Alloc(c) = e.body {
            e.body = Body::Free(c);
        }
        e
    }

    #[test]
    fn oldest_lists_the_n_longest_held_with_their_time_and_api() {
        let mut l = Ledger::default();
        for (ts, addr) in [(50, 0x5000), (10, 0x1000), (40, 0x4000), (20, 0x2000), (30, 0x3000)] {
            l.apply(&alloc(10, ts, addr, ts * 100, 3));
        }
        l.apply(&free(10, 0x1000, 1000));
        let oldest = l.oldest(10, 3);
        let got: Vec<_> = oldest.iter().map(|a| (a.ts_ns, a.key.1, a.size, a.api, a.device)).collect();
        assert_eq!(
            got,
            vec![
                (20, 0x2000, 2000, 3, Some(1)),
                (30, 0x3000, 3000, 3, Some(1)),
                (40, 0x4000, 4000, 3, Some(1))
            ]
        );
        assert_eq!(l.oldest(10, 100).len(), 4, "all of them when fewer than asked");
        assert!(l.oldest(10, 0).is_empty());
        assert!(l.oldest(99, 3).is_empty(), "no such process");
    }

    #[test]
    fn a_reused_address_is_as_old_as_its_newest_allocation() {
        let mut l = Ledger::default();
        l.apply(&alloc(10, 5, 0x1000, 64, 1));
        l.apply(&alloc(10, 9, 0x2000, 64, 1));
        // The free of 0x1000 was never seen: the new allocation replaces it.
        l.apply(&alloc(10, 12, 0x1000, 128, 2));
        let got: Vec<_> = l.oldest(10, 5).iter().map(|a| (a.ts_ns, a.key.1, a.size, a.api)).collect();
        assert_eq!(got, vec![(9, 0x2000, 64, 1), (12, 0x1000, 128, 2)]);
    }
}
