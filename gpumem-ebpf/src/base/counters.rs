//! Per-CPU counters of what the kernel could not do (`gpumem_common::stat`),
//! summed and reported by the agent.
use gpumem_common::stat;

use crate::maps::STATS;

/// Counts one occurrence of `stat::*` on this CPU.
#[inline(always)]
pub fn count(which: u32) {
    if which == stat::MAP_FULL {
        crate::base::log::map_full();
    }
    if let Some(p) = STATS.get_ptr_mut(which) {
        // SAFETY: this CPU's slot, a u64 map value. Atomic: a run preempted
        // on this CPU may be counting too.
        unsafe { crate::base::atomic::add_nofetch(p, 1) };
    }
}
