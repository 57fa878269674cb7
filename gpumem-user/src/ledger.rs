//! The agent's ledger: usage per process and per cgroup, split by device
//! and memory kind, rebuilt from the record stream.
//!
//! Pure logic, no I/O. It mirrors the kernel's maps (the source of truth)
//! by applying the same rules to the records the kernel sends; the agent
//! reports both, so any difference (lost records) is visible.
//!
//! `holders` answers who holds the memory among the live allocations a
//! device or a limit covers (the `holders` of out-of-memory and limit
//! records).
//! `oldest` lists the live allocations a process has held longest (`gpumem
//! top`), each with its record's time and entry point.
mod adopt;
pub mod holders;
pub mod oldest;

use std::collections::BTreeMap;

use gpumem_common::{ns, LiveAlloc, LiveKey, DEVICE_UNKNOWN};

use crate::decode::{Body, Change, Event, Origin};

use crate::fast_hash::HashMap;

/// A device ordinal, or None where the calling thread's context was not
/// known.
pub type Device = Option<u32>;

/// Bytes held, in total and split by (memory kind, device).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub split: BTreeMap<(u32, Device), u64>,
}

impl Usage {
    fn charge(&mut self, kind: u32, device: Device, size: u64) {
        self.bytes = self.bytes.wrapping_add(size);
        *self.split.entry((kind, device)).or_default() += size;
    }

    fn uncharge(&mut self, kind: u32, device: Device, size: u64) {
        self.bytes = self.bytes.saturating_sub(size);
        if let Some(v) = self.split.get_mut(&(kind, device)) {
            *v = v.saturating_sub(size);
            if *v == 0 {
                self.split.remove(&(kind, device));
            }
        }
    }
}

/// A live allocation's key in its process's map: (namespace, address),
/// packed into 12 bytes (as a tuple it takes 16).
#[repr(C, packed(4))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    ns: u32,
    addr: u64,
}

impl Key {
    fn of((ns, addr): (u32, u64)) -> Self {
        Self { ns, addr }
    }

    fn pair(self) -> (u32, u64) {
        (self.ns, self.addr)
    }
}

/// One live allocation, as a process's map keeps it (plain numbers: the
/// hot path copies it, never allocates for it), in 36 bytes aligned to 4
/// (40 aligned to 8 with the device as an `Option`): with its key, 48
/// bytes an entry instead of 56, which with 100k live allocations is
/// 1.6 MB less at the peak of the table's growth (old and new tables).
#[repr(C, packed(4))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    size: u64,
    cgroup_id: u64,
    /// The allocation's record time (CLOCK_MONOTONIC ns).
    ts_ns: u64,
    kind: u32,
    /// The device ordinal, or `DEVICE_UNKNOWN` (see [`Live::device`]).
    device: u32,
    /// The entry point that allocated it (`gpumem_common::api::id`).
    api: u32,
}

const _: () = assert!(size_of::<(Key, Live)>() == 48);

impl Live {
    fn new(size: u64, cgroup_id: u64, ts_ns: u64, kind: u32, device: Device, api: u32) -> Self {
        // A record's device is never DEVICE_UNKNOWN itself: that is None.
        let device = device.unwrap_or(DEVICE_UNKNOWN);
        Self { size, cgroup_id, ts_ns, kind, device, api }
    }

    fn of(c: &Change, o: &Origin) -> Self {
        Self::new(c.size, o.cgroup_id, o.ts_ns, c.kind, c.device, o.api)
    }

    fn device(&self) -> Device {
        let d = self.device;
        (d != DEVICE_UNKNOWN).then_some(d)
    }

    /// As [`Ledger::live_allocations`] lists it.
    fn listed<'a>(&self, tgid: u32, comm: &'a str, key: Key) -> LiveAllocation<'a> {
        LiveAllocation {
            tgid,
            comm,
            key: key.pair(),
            size: self.size,
            kind: self.kind,
            cgroup_id: self.cgroup_id,
            device: self.device(),
            ts_ns: self.ts_ns,
            api: self.api,
        }
    }
}

/// A live allocation, as [`Ledger::live_allocations`] lists it.
#[derive(Debug, Clone, Copy)]
pub struct LiveAllocation<'a> {
    pub tgid: u32,
    pub comm: &'a str,
    /// (namespace, address).
    pub key: (u32, u64),
    pub size: u64,
    /// `gpumem_common::kind`.
    pub kind: u32,
    pub cgroup_id: u64,
    pub device: Device,
    /// When it was allocated (the record's CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// The entry point that allocated it (`gpumem_common::api::id`).
    pub api: u32,
}

impl<'a> LiveAllocation<'a> {
    /// The kernel's live allocation `a` at `k`, of process `comm`, as
    /// known at `ts_ns`.
    pub fn of_kernel(k: &LiveKey, a: &LiveAlloc, comm: &'a str, ts_ns: u64) -> Self {
        Self {
            tgid: k.tgid,
            comm,
            key: k.as_recorded(a),
            size: a.size,
            kind: a.kind,
            cgroup_id: a.cgroup_id,
            device: (a.device != DEVICE_UNKNOWN).then_some(a.device),
            ts_ns,
            api: a.api,
        }
    }
}

/// One process in the ledger.
#[derive(Debug, Default, Clone)]
pub struct Process {
    pub usage: Usage,
    /// Thread name at its latest call.
    pub comm: String,
    /// cgroup of its latest call.
    pub cgroup_id: u64,
    live: HashMap<Key, Live>,
    /// Allocations whose address the driver handed out again before
    /// their free's record came (a free recorded at its return, on
    /// another thread): still held, each until a free of its address and
    /// its size, kind, device and cgroup.
    freeing: HashMap<Key, Vec<Live>>,
}

impl Process {
    /// Number of live allocations.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// The allocation at `key` whose free's record is still to come that
    /// a free of `freed` (its size, kind, device and cgroup) is of, taken
    /// out; None where there is none (the free is of the one in `live`).
    fn take_freeing(&mut self, key: Key, freed: &Live) -> Option<Live> {
        let waiting = self.freeing.get_mut(&key)?;
        let at = waiting.iter().position(|l| {
            (l.size, l.kind, l.device, l.cgroup_id) == (freed.size, freed.kind, freed.device, freed.cgroup_id)
        })?;
        let taken = waiting.swap_remove(at);
        if waiting.is_empty() {
            self.freeing.remove(&key);
        }
        Some(taken)
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
    /// Records that changed what is held, so far: what a cached answer
    /// about holders is valid for.
    changes: u64,
    /// When this ledger was seeded from the kernel's live allocations (an
    /// adopting agent), else 0: the ring's records dated before it are of
    /// allocations the seed may hold already.
    adopted_at_ns: u64,
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
    pub fn apply(&mut self, e: &Event) {
        let tgid = e.origin.pid;
        if matches!(e.body, Body::Alloc(_) | Body::Free(_) | Body::Exit(_) | Body::Exec(_)) {
            self.changes += 1;
        }
        match &e.body {
            Body::Alloc(c) | Body::Free(c) if self.of_released_image(tgid, c.generation) => {
                // Its bytes went with the image's `exit`/`exec` record, which
                // reached the ring buffer first.
                self.late += 1;
            }
            Body::Alloc(c) => self.alloc(e, c),
            Body::Free(c) if !c.untracked => {
                // Only what the ledger holds: after an adoption the ring
                // still has frees of allocations gone before it.
                if let Some(p) = self.procs.get_mut(&tgid) {
                    let key = Key { ns: ns::for_kind(c.kind), addr: c.addr };
                    let freed = p.take_freeing(key, &Live::of(c, &e.origin)).or_else(|| p.live.remove(&key));
                    if let Some(freed) = freed {
                        p.usage.uncharge(freed.kind, freed.device(), freed.size);
                        uncharge_cgroup(&mut self.cgroups, &freed);
                    }
                }
            }
            Body::Exit(r) | Body::Exec(r) => {
                self.remember_released(tgid, r.generation, e.origin.ts_ns);
                if let Some(p) = self.procs.remove(&tgid) {
                    for live in p.live.values().chain(p.freeing.values().flatten()) {
                        uncharge_cgroup(&mut self.cgroups, live);
                    }
                }
            }
            _ => {}
        }
    }

    fn alloc(&mut self, e: &Event, c: &Change) {
        let key = Key { ns: ns::for_kind(c.kind), addr: c.addr };
        self.charge(e.origin.pid, &e.origin.comm, key, Live::of(c, &e.origin), c.replaced_stale);
    }

    /// Takes in an allocation the kernel held when this agent started (an
    /// earlier agent's, adopted from the pinned maps), as its `alloc`
    /// record would have; `a.ts_ns` is when it was adopted.
    pub fn adopt(&mut self, a: &LiveAllocation<'_>) {
        let live = Live::new(a.size, a.cgroup_id, a.ts_ns, a.kind, a.device, a.api);
        self.charge(a.tgid, a.comm, Key::of(a.key), live, true);
    }

    /// Charges `live` at `key`. Where the ledger holds an allocation at
    /// `key` already, the kernel's record says which it is (`stale`): one
    /// whose free was never seen, whose charge goes (as the kernel's
    /// does), or one a free on another thread had taken out before the
    /// driver handed its address out again, held until that free's
    /// record comes. A record dated before an adoption replaces what it
    /// finds too: that is the adopted allocation itself, or one the
    /// ring's later records free and replace again.
    fn charge(&mut self, tgid: u32, comm: &str, key: Key, live: Live, stale: bool) {
        let stale = stale || live.ts_ns < self.adopted_at_ns;
        let p = self.procs.entry(tgid).or_default();
        // The process's name is its first allocating thread's, kept: a
        // name that changed with each thread (a trainer's workers) would
        // make a new metrics series at every scrape. exec starts afresh.
        if p.comm.is_empty() {
            p.comm = comm.to_string();
        }
        p.cgroup_id = live.cgroup_id;
        if let Some(before) = p.live.insert(key, live) {
            if stale {
                p.usage.uncharge(before.kind, before.device(), before.size);
                uncharge_cgroup(&mut self.cgroups, &before);
            } else {
                p.freeing.entry(key).or_default().push(before);
            }
        }
        p.usage.charge(live.kind, live.device(), live.size);
        self.cgroups.entry(live.cgroup_id).or_default().charge(live.kind, live.device(), live.size);
    }

    /// Records applied so far that changed what is held.
    pub fn changes(&self) -> u64 {
        self.changes
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
            .flat_map(|(&tgid, p)| p.live.iter().map(move |(&key, l)| l.listed(tgid, &p.comm, key)))
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
    let cgroup_id = live.cgroup_id;
    if let Some(u) = cgroups.get_mut(&cgroup_id) {
        u.uncharge(live.kind, live.device(), live.size);
        if u.bytes == 0 {
            cgroups.remove(&cgroup_id);
        }
    }
}

#[cfg(test)]
mod tests;
