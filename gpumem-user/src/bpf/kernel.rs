//! Reading the kernel's usage maps and counters: the source of truth the
//! agent's ledger is checked against. Read only: the agent writes no map
//! but the limit maps (`limits/table.rs`) and the idle marks
//! (`bpf/wake.rs`).
use std::collections::HashMap;

use aya::maps::{Array, HashMap as BpfHashMap, IterableMap, MapData, PerCpuArray};
use gpumem_common::{map_name, ns, spilled, stat, LiveAlloc, LiveKey, Pending, PendingKey, ProcUsage};

use super::{
    batch::entries, error::BpfError, hashed::HashedMaps, live_table::LiveTable, skipped::SkippedRuns, Tracer,
};

/// Handles on the kernel's usage maps.
pub struct KernelMaps {
    procs: BpfHashMap<MapData, u32, ProcUsage>,
    cgroups: BpfHashMap<MapData, u64, u64>,
    stats: PerCpuArray<MapData, u64>,
    /// Calls in flight, per thread and API.
    pending: BpfHashMap<MapData, PendingKey, Pending>,
    /// Live allocations: VMM handles, and those the table does not keep.
    live: BpfHashMap<MapData, LiveKey, LiveAlloc>,
    /// Live allocations but VMM handles.
    table: LiveTable,
    /// Whether the programs look in `live` for allocations but VMM handles.
    spilled: Array<MapData, u64>,
    /// Every loaded program's runs the kernel skipped.
    programs: Vec<SkippedRuns>,
}

/// Kernel counters, summed over CPUs (see `gpumem_common::stat`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub ringbuf_drops: u64,
    pub map_full: u64,
    pub unmatched_returns: u64,
    pub cgroup_slots_full: u64,
    pub out_ptr_unreadable: u64,
    /// Runs of gpumem's programs the kernel skipped (`recursion_misses`:
    /// another run of the program was under way on that CPU). Uprobe
    /// programs have no such check (and run on their task's stack, see
    /// gpumem-ebpf's base/task_stack.rs); the raw tracepoint programs and
    /// the agent's release runs do, so a count here is an exit-side run.
    pub skipped_runs: u64,
    /// Memory queries answered with a limit's view (`view=limit`).
    pub view_rewrites: u64,
}

impl KernelMaps {
    /// The maps the agent reads, and handles of their own on the hash
    /// maps of live entries, for the sweep's thread (`health/reclaim.rs`).
    pub fn take(tracer: &mut Tracer) -> Result<(Self, HashedMaps), BpfError> {
        let procs: BpfHashMap<MapData, u32, ProcUsage> = tracer.take_map(map_name::PROC_USAGE)?;
        let live: BpfHashMap<MapData, LiveKey, LiveAlloc> = tracer.take_map(map_name::LIVE)?;
        let cgroups: BpfHashMap<MapData, u64, u64> = tracer.take_map(map_name::CGROUP_USAGE)?;
        let mappings = tracer.take_map(map_name::VMM_MAPPINGS)?;
        let hashed = HashedMaps::new(live.map(), procs.map(), cgroups.map(), mappings)?;
        let maps = Self {
            procs,
            cgroups,
            stats: tracer.take_map(map_name::STATS)?,
            pending: tracer.take_map(map_name::PENDING)?,
            live,
            table: LiveTable::of(tracer.take_any_map(map_name::LIVE_TABLE)?)?,
            spilled: tracer.take_map(map_name::LIVE_SPILLED)?,
            programs: tracer.program_fds().into_iter().map(SkippedRuns::of).collect(),
        };
        Ok((maps, hashed))
    }

    /// Bytes held per process, as the kernel counts them (a released
    /// process, whose entry waits for its last threads, holds nothing).
    pub fn processes(&self) -> HashMap<u32, u64> {
        entries(&self.procs)
            .into_iter()
            .filter(|(_, u)| !u.released())
            .map(|(tgid, u)| (tgid, u.bytes))
            .collect()
    }

    /// Released processes' usage entries, kept for their last threads.
    pub fn released_entries(&self) -> u64 {
        entries(&self.procs).iter().filter(|(_, u)| u.released()).count() as u64
    }

    /// Every process usage entry's generation, released ones too: what the
    /// agent finishes for a process it finds gone (`Gone::Process`).
    pub fn usage_entries(&self) -> HashMap<u32, u64> {
        entries(&self.procs).into_iter().map(|(tgid, u)| (tgid, u.generation)).collect()
    }

    /// The threads with entries in `PENDING`, by process (tgid: tids):
    /// each called the driver and has not exited, or its exit's run was
    /// skipped.
    pub fn threads_with_calls(&self) -> std::collections::BTreeMap<u32, Vec<u32>> {
        let mut threads: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for (k, _) in entries(&self.pending) {
            threads.entry((k.pid_tgid >> 32) as u32).or_default().push(k.pid_tgid as u32);
        }
        for tids in threads.values_mut() {
            tids.sort_unstable();
            tids.dedup(); // one key per API a thread called
        }
        threads
    }

    /// Bytes held per cgroup id, as the kernel counts them.
    pub fn cgroups(&self) -> HashMap<u64, u64> {
        entries(&self.cgroups).into_iter().collect()
    }

    /// The live allocations the kernel holds now (the table's and the hash
    /// map's), each of its process's current image (entries of images
    /// that exited or exec'd are left until their address is reused, and
    /// are not held): what an agent adopting pinned maps starts its ledger
    /// from, and what a limit set at run time carries.
    pub fn held(&self) -> Vec<(LiveKey, LiveAlloc)> {
        let procs: HashMap<u32, ProcUsage> = entries(&self.procs).into_iter().collect();
        self.table
            .held()
            .into_iter()
            .chain(entries(&self.live))
            .filter(|(k, a)| procs.get(&k.tgid).is_some_and(|p| p.generation == a.generation))
            .collect()
    }

    /// Empties the live table's slots of process images that exited or
    /// exec'd (`LiveTable::reclaim`); how many.
    pub fn reclaim_dead(&self) -> Result<u64, BpfError> {
        self.table
            .reclaim(|| entries(&self.procs).into_iter().map(|(tgid, u)| (tgid, u.generation)).collect())
    }

    /// Allocations the programs put in `LIVE` because their table slots
    /// were taken (`spilled::COUNT`; a moment's count: it goes up before
    /// each goes in and down after each comes out).
    pub fn spilled(&self) -> u64 {
        self.spilled.get(&spilled::COUNT, 0).unwrap_or(0)
    }

    /// After a takeover from a build before the live table, `LIVE` held
    /// that build's allocations (`spilled::OLD`): once it holds none but
    /// VMM handles, the programs need no longer look there for them. That
    /// build is gone, so none comes back; this build's own are counted
    /// apart (`spilled::COUNT`). Whether the mark was cleared.
    pub fn forget_old_spill(&mut self) -> Result<bool, BpfError> {
        let name = map_name::LIVE_SPILLED;
        let map_err = |e| BpfError::Map { name, source: Box::new(e) };
        if self.spilled.get(&spilled::OLD, 0).map_err(map_err)? == 0 {
            return Ok(false);
        }
        // A key that cannot be read counts as one of that build's.
        if self.live.keys().any(|k| k.map_or(true, |k| k.ns != ns::VMM_HANDLE)) {
            return Ok(false);
        }
        self.spilled.set(spilled::OLD, 0, 0).map_err(map_err)?;
        Ok(true)
    }

    pub fn stats(&self) -> Stats {
        let sum = |i: u32| -> u64 {
            self.stats.get(&i, 0).map(|v| v.iter().copied().fold(0u64, u64::wrapping_add)).unwrap_or(0)
        };
        Stats {
            ringbuf_drops: sum(stat::RINGBUF_DROPS),
            map_full: sum(stat::MAP_FULL),
            unmatched_returns: sum(stat::UNMATCHED_RETURNS),
            cgroup_slots_full: sum(stat::CGROUP_SLOTS_FULL),
            out_ptr_unreadable: sum(stat::OUT_PTR_UNREADABLE),
            view_rewrites: sum(stat::VIEW_REWRITES),
            skipped_runs: self.programs.iter().filter_map(SkippedRuns::now).fold(0, u64::wrapping_add),
        }
    }
}
