//! Reading the kernel's usage maps and counters: the source of truth the
//! agent's ledger is checked against.
use std::collections::HashMap;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use gpumem_common::{map_name, stat, ProcUsage};

use super::{BpfError, Tracer};

/// Handles on the kernel's usage maps.
pub struct KernelMaps {
    procs: BpfHashMap<MapData, u32, ProcUsage>,
    cgroups: BpfHashMap<MapData, u64, u64>,
    stats: PerCpuArray<MapData, u64>,
}

/// Kernel counters, summed over CPUs (see `gpumem_common::stat`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub ringbuf_drops: u64,
    pub map_full: u64,
    pub unmatched_returns: u64,
    pub cgroup_slots_full: u64,
    pub out_ptr_unreadable: u64,
}

impl KernelMaps {
    pub fn take(tracer: &mut Tracer) -> Result<Self, BpfError> {
        Ok(Self {
            procs: tracer.take_map(map_name::PROC_USAGE)?,
            cgroups: tracer.take_map(map_name::CGROUP_USAGE)?,
            stats: tracer.take_map(map_name::STATS)?,
        })
    }

    /// Bytes held per process, as the kernel counts them.
    pub fn processes(&self) -> HashMap<u32, u64> {
        self.procs.iter().flatten().map(|(tgid, u)| (tgid, u.bytes)).collect()
    }

    /// Bytes held per cgroup id, as the kernel counts them.
    pub fn cgroups(&self) -> HashMap<u64, u64> {
        self.cgroups.iter().flatten().collect()
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
        }
    }
}
