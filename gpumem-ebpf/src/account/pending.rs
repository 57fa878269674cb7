//! Calls in flight: what each thread's call to an API kept at its entry
//! for its return (`PENDING`, see `gpumem_common::pending`).
use gpumem_common::{stat, CallState, Pending, PendingKey};

use crate::{
    account::limit_usage,
    base::counters::count,
    maps::{CALLERS, PENDING},
};

/// Takes the entry-time state of this thread's call to `api` (and
/// disarms it); None, counted, when there is none (its entry was missed).
#[inline(always)]
pub fn take(api: u32) -> Option<Pending> {
    let slot = PENDING.get_ptr_mut(key(api));
    // SAFETY: checked map value pointer; only this thread uses its key.
    let p = slot.map(|s| unsafe { core::ptr::read_volatile(s) }).filter(|p| p.armed == 1);
    match (slot, p) {
        (Some(slot), Some(p)) => {
            // SAFETY: as above.
            unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).armed), 0) };
            Some(p)
        }
        _ => {
            count(stat::UNMATCHED_RETURNS);
            None
        }
    }
}

/// Remembers the entry-time state of this thread's call to `api`: in place
/// when the thread called it before, else as a new entry (and its process
/// is marked as having some, for its threads' exits to remove).
#[inline(always)]
pub fn put(api: u32, call: CallState) {
    remember(api, call, false);
}

/// [`put`] for a call that reserved bytes under limits (an allocation,
/// see `families::alloc::admit_and_remember`, the only one): an entry
/// still armed is a call of the same API whose return the kernel skipped,
/// and what it reserved goes back first. Other APIs' entries never
/// reserve, so their programs leave that out.
#[inline(always)]
pub fn put_reserving(api: u32, call: CallState) {
    remember(api, call, true);
}

#[inline(always)]
fn remember(api: u32, call: CallState, reserves: bool) {
    let key = key(api);
    let armed = Pending { armed: 1, _pad: 0, call };
    if let Some(slot) = PENDING.get_ptr_mut(key) {
        if reserves {
            limit_usage::abandon(slot);
        }
        // SAFETY: checked map value pointer; only this thread uses its key.
        unsafe { core::ptr::write_volatile(slot, armed) };
        return;
    }
    if PENDING.insert(key, armed, 0).is_err() {
        count(stat::MAP_FULL);
    }
    let _ = CALLERS.insert((key.pid_tgid >> 32) as u32, 1, 0);
}

#[inline(always)]
fn key(api: u32) -> PendingKey {
    PendingKey { pid_tgid: aya_ebpf::helpers::bpf_get_current_pid_tgid(), api, _pad: 0 }
}
