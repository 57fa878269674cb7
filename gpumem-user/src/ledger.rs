//! The agent's ledger: usage per process and per cgroup, split by device
//! and memory kind, rebuilt from the record stream.
//!
//! Pure logic, no I/O. It mirrors the kernel's maps (the source of truth)
//! by applying the same rules to the records the kernel sends; the agent
//! reports both, so any difference (lost records) is visible.
use std::collections::{BTreeMap, HashMap};

use gpumem_common::{event_type, ns, EventRecord, FLAG_UNTRACKED};

/// Bytes held, in total and split by (memory kind, device).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub split: BTreeMap<(u32, u32), u64>,
}

impl Usage {
    fn charge(&mut self, kind: u32, device: u32, size: u64) {
        self.bytes = self.bytes.wrapping_add(size);
        *self.split.entry((kind, device)).or_default() += size;
    }

    fn uncharge(&mut self, kind: u32, device: u32, size: u64) {
        self.bytes = self.bytes.saturating_sub(size);
        if let Some(v) = self.split.get_mut(&(kind, device)) {
            *v = v.saturating_sub(size);
            if *v == 0 {
                self.split.remove(&(kind, device));
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    size: u64,
    cgroup_id: u64,
    kind: u32,
    device: u32,
}

/// A live allocation, as [`Ledger::live_allocations`] lists it.
#[derive(Debug, Clone, Copy)]
pub struct LiveAllocation<'a> {
    pub tgid: u32,
    pub comm: &'a str,
    /// (namespace, address).
    pub key: (u32, u64),
    pub size: u64,
    pub cgroup_id: u64,
    pub device: u32,
}

/// One process in the ledger.
#[derive(Debug, Default, Clone)]
pub struct Process {
    pub usage: Usage,
    /// Thread name at its latest call.
    pub comm: String,
    /// cgroup of its latest call.
    pub cgroup_id: u64,
    live: HashMap<(u32, u64), Live>,
}

impl Process {
    /// Number of live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }
}

#[derive(Debug, Default)]
pub struct Ledger {
    procs: HashMap<u32, Process>,
    cgroups: HashMap<u64, Usage>,
    /// The newest process image released per tgid, with when (record
    /// time): an `alloc` or `free` of that image or an older one arrives
    /// late and changes nothing.
    released: HashMap<u32, Released>,
    late: u64,
}

#[derive(Debug, Clone, Copy)]
struct Released {
    generation: u64,
    at_ns: u64,
}

/// Released images remembered at most this long after their release once
/// many are kept (late records arrive within microseconds of it).
const RELEASED_KEEP_NS: u64 = 60_000_000_000;
const RELEASED_PRUNE_ABOVE: usize = 4096;

impl Ledger {
    /// Applies one kernel record.
    pub fn apply(&mut self, r: &EventRecord) {
        let tgid = r.tgid();
        if matches!(r.event, event_type::ALLOC | event_type::FREE)
            && self.of_released_image(tgid, r.generation)
        {
            // Its bytes went with the image's `exit`/`exec` record, which
            // reached the ring buffer first.
            self.late += 1;
            return;
        }
        match r.event {
            event_type::ALLOC => {
                let p = self.procs.entry(tgid).or_default();
                p.comm = comm(&r.comm);
                p.cgroup_id = r.cgroup_id;
                let live = Live { size: r.size, cgroup_id: r.cgroup_id, kind: r.kind, device: r.device };
                // Same rule as the kernel: an entry at this address is an
                // allocation whose free was never seen; its charge goes.
                if let Some(stale) = p.live.insert((ns::for_kind(r.kind), r.addr), live) {
                    p.usage.uncharge(stale.kind, stale.device, stale.size);
                    uncharge_cgroup(&mut self.cgroups, &stale);
                }
                p.usage.charge(r.kind, r.device, r.size);
                self.cgroups.entry(r.cgroup_id).or_default().charge(r.kind, r.device, r.size);
            }
            event_type::FREE if r.flags & FLAG_UNTRACKED == 0 => {
                let freed = Live { size: r.size, cgroup_id: r.cgroup_id, kind: r.kind, device: r.device };
                if let Some(p) = self.procs.get_mut(&tgid) {
                    p.live.remove(&(ns::for_kind(r.kind), r.addr));
                    p.usage.uncharge(freed.kind, freed.device, freed.size);
                }
                uncharge_cgroup(&mut self.cgroups, &freed);
            }
            event_type::EXIT | event_type::EXEC => {
                self.remember_released(tgid, r.generation, r.ts_ns);
                if let Some(p) = self.procs.remove(&tgid) {
                    for live in p.live.values() {
                        uncharge_cgroup(&mut self.cgroups, live);
                    }
                }
            }
            event_type::ALLOC_FAILED => {
                if let Some(p) = self.procs.get_mut(&tgid) {
                    p.comm = comm(&r.comm);
                }
            }
            _ => {}
        }
    }

    /// `alloc` and `free` records that arrived after the release of the
    /// process image they belong to, and so changed nothing.
    pub fn late_records(&self) -> u64 {
        self.late
    }

    fn of_released_image(&self, tgid: u32, generation: u64) -> bool {
        generation != 0 && self.released.get(&tgid).is_some_and(|r| generation <= r.generation)
    }

    fn remember_released(&mut self, tgid: u32, generation: u64, at_ns: u64) {
        if generation == 0 {
            return;
        }
        let newest = self.released.get(&tgid).map_or(0, |r| r.generation).max(generation);
        self.released.insert(tgid, Released { generation: newest, at_ns });
        if self.released.len() > RELEASED_PRUNE_ABOVE {
            self.released.retain(|_, r| at_ns.saturating_sub(r.at_ns) < RELEASED_KEEP_NS);
        }
    }

    /// Every live allocation.
    pub fn live_allocations(&self) -> Vec<LiveAllocation<'_>> {
        self.procs
            .iter()
            .flat_map(|(&tgid, p)| {
                p.live.iter().map(move |(&key, l)| LiveAllocation {
                    tgid,
                    comm: &p.comm,
                    key,
                    size: l.size,
                    cgroup_id: l.cgroup_id,
                    device: l.device,
                })
            })
            .collect()
    }

    pub fn process(&self, tgid: u32) -> Option<&Process> {
        self.procs.get(&tgid)
    }

    /// Processes, by tgid, in tgid order.
    pub fn processes(&self) -> Vec<(u32, &Process)> {
        let mut v: Vec<_> = self.procs.iter().map(|(k, p)| (*k, p)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// cgroups holding memory, in id order.
    pub fn cgroups(&self) -> Vec<(u64, &Usage)> {
        let mut v: Vec<_> = self.cgroups.iter().map(|(k, u)| (*k, u)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    pub fn cgroup(&self, id: u64) -> Option<&Usage> {
        self.cgroups.get(&id)
    }
}

fn uncharge_cgroup(cgroups: &mut HashMap<u64, Usage>, live: &Live) {
    if let Some(u) = cgroups.get_mut(&live.cgroup_id) {
        u.uncharge(live.kind, live.device, live.size);
        if u.bytes == 0 {
            cgroups.remove(&live.cgroup_id);
        }
    }
}

/// A NUL-padded kernel comm as a string.
pub fn comm(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use gpumem_common::kind;

    use super::*;

    fn rec(event: u32, tgid: u32, cg: u64, addr: u64, size: u64) -> EventRecord {
        EventRecord {
            event,
            pid_tgid: (u64::from(tgid) << 32) | u64::from(tgid + 1),
            cgroup_id: cg,
            addr,
            size,
            kind: kind::DEVICE,
            device: 0,
            comm: *b"worker\0\0\0\0\0\0\0\0\0\0",
            ..Default::default()
        }
    }

    #[test]
    fn alloc_then_free_returns_to_zero() {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 4096));
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x2000, 100));
        assert_eq!(l.process(10).unwrap().usage.bytes, 4196);
        assert_eq!(l.process(10).unwrap().comm, "worker");
        assert_eq!(l.cgroup(7).unwrap().bytes, 4196);
        l.apply(&rec(event_type::FREE, 10, 7, 0x1000, 4096));
        assert_eq!(l.process(10).unwrap().usage.bytes, 100);
        assert_eq!(l.process(10).unwrap().live_count(), 1);
        l.apply(&rec(event_type::FREE, 10, 7, 0x2000, 100));
        assert_eq!(l.process(10).unwrap().usage.bytes, 0);
        assert!(l.cgroup(7).is_none(), "empty cgroups leave the ledger");
    }

    #[test]
    fn exit_uncharges_every_cgroup_the_process_charged() {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
        l.apply(&rec(event_type::ALLOC, 10, 8, 0x2000, 20));
        l.apply(&rec(event_type::ALLOC, 11, 8, 0x1000, 5));
        l.apply(&rec(event_type::EXIT, 10, 8, 0, 30));
        assert!(l.process(10).is_none());
        assert!(l.cgroup(7).is_none());
        assert_eq!(l.cgroup(8).unwrap().bytes, 5);
        assert_eq!(l.process(11).unwrap().usage.bytes, 5);
    }

    #[test]
    fn live_allocations_list_each_with_its_process_cgroup_and_device() {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 5));
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x2000, 6));
        l.apply(&rec(event_type::FREE, 10, 7, 0x1000, 5));
        let live = l.live_allocations();
        assert_eq!(live.len(), 1);
        let a = live[0];
        assert_eq!((a.tgid, a.key.1, a.size, a.cgroup_id), (10, 0x2000, 6, 7));
    }

    #[test]
    fn exec_forgets_the_old_image() {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
        l.apply(&rec(event_type::EXEC, 10, 7, 0, 10));
        assert!(l.process(10).is_none());
        assert!(l.cgroup(7).is_none());
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 5));
        assert_eq!(l.process(10).unwrap().usage.bytes, 5);
    }

    #[test]
    fn failed_and_untracked_records_change_nothing() {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
        l.apply(&rec(event_type::ALLOC_FAILED, 10, 7, 0, 1 << 40));
        let mut untracked = rec(event_type::FREE, 10, 7, 0x9000, 0);
        untracked.flags = FLAG_UNTRACKED;
        l.apply(&untracked);
        assert_eq!(l.process(10).unwrap().usage.bytes, 10);
        assert_eq!(l.cgroup(7).unwrap().bytes, 10);
    }

    #[test]
    fn reused_address_replaces_the_stale_allocation() {
        let mut l = Ledger::default();
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 10));
        l.apply(&rec(event_type::ALLOC, 10, 7, 0x1000, 30));
        assert_eq!(l.process(10).unwrap().usage.bytes, 30);
        assert_eq!(l.cgroup(7).unwrap().bytes, 30);
    }

    #[test]
    fn split_by_kind_and_device() {
        let mut l = Ledger::default();
        let mut a = rec(event_type::ALLOC, 10, 7, 0x1000, 10);
        a.device = 1;
        l.apply(&a);
        let mut b = rec(event_type::ALLOC, 10, 7, 0x2000, 20);
        b.kind = kind::MANAGED;
        l.apply(&b);
        let split = &l.process(10).unwrap().usage.split;
        assert_eq!(split.get(&(kind::DEVICE, 1)), Some(&10));
        assert_eq!(split.get(&(kind::MANAGED, 0)), Some(&20));
    }

    #[test]
    fn records_of_a_released_image_arriving_after_its_exit_change_nothing() {
        let mut l = Ledger::default();
        let image = |mut r: EventRecord, generation| {
            r.generation = generation;
            r
        };
        l.apply(&image(rec(event_type::ALLOC, 10, 7, 0x1000, 10), 5));
        l.apply(&image(rec(event_type::EXIT, 10, 7, 0, 30), 5));
        // Charged (and released) before the exit, sent after it.
        l.apply(&image(rec(event_type::ALLOC, 10, 7, 0x2000, 20), 5));
        l.apply(&image(rec(event_type::FREE, 10, 7, 0x1000, 10), 5));
        assert!(l.process(10).is_none());
        assert!(l.cgroup(7).is_none());
        assert_eq!(l.late_records(), 2);
        // A later image of the same tgid counts again.
        l.apply(&image(rec(event_type::ALLOC, 10, 7, 0x2000, 20), 9));
        assert_eq!(l.process(10).unwrap().usage.bytes, 20);
        assert_eq!(l.cgroup(7).unwrap().bytes, 20);
    }

    #[test]
    fn released_images_are_forgotten_a_while_after_release_once_many() {
        let mut l = Ledger::default();
        for tgid in 0..=RELEASED_PRUNE_ABOVE as u32 {
            let mut exit = rec(event_type::EXIT, tgid, 7, 0, 0);
            exit.generation = 1;
            l.apply(&exit);
        }
        assert_eq!(l.released.len(), RELEASED_PRUNE_ABOVE + 1);
        let mut late = rec(event_type::EXIT, 99_999, 7, 0, 0);
        (late.generation, late.ts_ns) = (1, RELEASED_KEEP_NS);
        l.apply(&late);
        assert_eq!(l.released.len(), 1, "only the one released within the window is kept");
    }

    #[test]
    fn comm_stops_at_nul() {
        assert_eq!(comm(b"python3\0garbage\0"), "python3");
        assert_eq!(comm(b"0123456789abcdef"), "0123456789abcdef");
    }
}
