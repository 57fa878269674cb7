//! The ledger rebuilt from the kernel's live allocations, for an agent
//! that adopts an earlier one's pinned maps (`gpumem run --persist`). The
//! ring buffer still holds records the earlier agent did not read; they
//! are applied after this, and change nothing twice: an `alloc` at an
//! address held replaces it with itself, a `free` of an address no longer
//! held is ignored, an `exit` finds its process already gone.
use std::collections::HashMap;

use gpumem_common::{LiveAlloc, LiveKey};

use super::{Ledger, LiveAllocation};

impl Ledger {
    /// A ledger holding `held` (the kernel's live allocations of current
    /// process images), each dated `now_ns`; process names from `/proc`.
    pub fn adopted(held: &[(LiveKey, LiveAlloc)], now_ns: u64) -> Self {
        let mut ledger = Self { adopted_at_ns: now_ns, ..Self::default() };
        let mut comms: HashMap<u32, String> = HashMap::new();
        for (k, a) in held {
            let comm = comms.entry(k.tgid).or_insert_with(|| comm_of(k.tgid));
            ledger.adopt(&LiveAllocation::of_kernel(k, a, comm, now_ns));
        }
        ledger
    }
}

/// `/proc/PID/comm` (empty if the process is gone).
fn comm_of(tgid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{tgid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use gpumem_common::{kind, ns};

    use super::*;

    #[test]
    fn adopted_allocations_are_held_once_per_address() {
        let key = |addr| LiveKey { tgid: 7, ns: ns::DEVICE_PTR, addr };
        let alloc = |size, cgroup_id| LiveAlloc {
            size,
            cgroup_id,
            kind: kind::DEVICE,
            device: 1,
            ..Default::default()
        };
        let held = [(key(0x1000), alloc(100, 3)), (key(0x2000), alloc(50, 3)), (key(0x1000), alloc(100, 3))];
        let ledger = Ledger::adopted(&held, 5);
        let p = ledger.process(7).expect("process adopted");
        assert_eq!((p.usage.bytes, p.live_count()), (150, 2));
        assert_eq!(p.usage.split.get(&(kind::DEVICE, Some(1))), Some(&150));
        assert_eq!(ledger.cgroup(3).map(|u| u.bytes), Some(150));
        assert!(ledger.live_allocations().iter().all(|a| a.ts_ns == 5));
    }

    /// The kernel keys a pool's allocation by its API's namespace (device
    /// pointers) whatever the pool's location; the records of one from a
    /// host pool say `host`. Adopted, it is found by its free's record.
    #[test]
    fn an_adopted_allocation_of_a_host_pool_is_freed_by_its_record() {
        use crate::decode::{Body, Change, Event, Origin};
        let key = LiveKey { tgid: 7, ns: ns::DEVICE_PTR, addr: 0x6000_0011_0000 };
        let a = LiveAlloc { size: 3 << 20, cgroup_id: 3, kind: kind::HOST, device: 0, ..Default::default() };
        let mut ledger = Ledger::adopted(&[(key, a)], 5);
        assert_eq!(ledger.process(7).map(|p| p.usage.bytes), Some(3 << 20));
        let origin = Origin { ts_ns: 9, pid: 7, tid: 7, cgroup_id: 3, comm: "trainer".into(), api: 0 };
        let c =
            Change { addr: key.addr, size: 3 << 20, kind: kind::HOST, device: Some(0), ..Change::default() };
        ledger.apply(&Event { origin, body: Body::Free(c) });
        assert_eq!(ledger.process(7).map_or(0, |p| p.usage.bytes), 0);
        assert_eq!(ledger.cgroup(3).map_or(0, |u| u.bytes), 0);
    }

    /// The ring still holds the alloc record of an allocation the ledger
    /// adopted (dated before the adoption): it is the same allocation,
    /// counted once. One dated after, at an address still held, is the
    /// driver handing the address out again before the first one's free
    /// was recorded: both are held until each one's free.
    #[test]
    fn an_adopted_allocations_own_record_counts_once_and_a_later_one_beside_it() {
        use crate::decode::{Body, Change, Event, Origin};
        let key = LiveKey { tgid: 7, ns: ns::DEVICE_PTR, addr: 0x7000 };
        let a = LiveAlloc { size: 100, cgroup_id: 3, kind: kind::DEVICE, device: 0, ..Default::default() };
        let event = |ts_ns, size, alloc: bool| {
            let origin = Origin { ts_ns, pid: 7, tid: 7, cgroup_id: 3, comm: "trainer".into(), api: 0 };
            let c = Change { addr: key.addr, size, kind: kind::DEVICE, device: Some(0), ..Change::default() };
            Event { origin, body: if alloc { Body::Alloc(c) } else { Body::Free(c) } }
        };
        let mut ledger = Ledger::adopted(&[(key, a)], 50);
        ledger.apply(&event(40, 100, true));
        assert_eq!(ledger.process(7).map(|p| (p.usage.bytes, p.live_count())), Some((100, 1)));
        ledger.apply(&event(60, 30, true));
        assert_eq!(ledger.process(7).map(|p| p.usage.bytes), Some(130), "both held");
        ledger.apply(&event(70, 100, false));
        assert_eq!(ledger.process(7).map(|p| p.usage.bytes), Some(30), "the first one's free");
        ledger.apply(&event(80, 30, false));
        assert_eq!(ledger.process(7).map_or(0, |p| p.usage.bytes), 0);
        assert_eq!(ledger.cgroup(3).map_or(0, |u| u.bytes), 0);
    }
}
