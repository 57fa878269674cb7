//! Per-CPU counters of what the kernel could not do (`gpumem_common::stat`),
//! summed and reported by the agent.
use gpumem_common::stat;

use crate::{base::log::log_warn, maps::STATS};

/// Counts one occurrence of `stat::*` on this CPU.
#[inline(always)]
pub fn count(which: u32) {
    if crate::base::log::ENABLED && which == stat::MAP_FULL {
        log_warn!(&(), "a map is full: an insert failed, this call's accounting is incomplete");
    }
    if let Some(p) = STATS.get_ptr_mut(which) {
        // SAFETY: per-CPU slot, no other writer on this CPU while we run.
        unsafe { *p += 1 };
    }
}
