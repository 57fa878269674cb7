//! Calls in flight: what each thread's call to an API kept at its entry
//! for its return (`PENDING`, see `gpumem_common::pending`).
use gpumem_common::{stat, CallState, Pending, PendingKey};

use crate::{
    account::limit_usage,
    base::{atomic::exchange, counters::count},
    maps::{CALLERS, PENDING},
};

/// Takes the entry-time state of this thread's call to `api` (and
/// disarms it); None, counted, when there is none (its entry was missed,
/// or the agent forgot it, taking the thread for gone).
#[inline(always)]
pub fn take(api: u32) -> Option<Pending> {
    let Some(slot) = PENDING.get_ptr_mut(key(api)) else {
        count(stat::UNMATCHED_RETURNS);
        return None;
    };
    // SAFETY: checked map value pointer; its state was written by this
    // thread before it was armed.
    let p = unsafe { core::ptr::read_volatile(slot) };
    if !disarm(slot) {
        count(stat::UNMATCHED_RETURNS);
        return None;
    }
    Some(p)
}

/// Disarms a `PENDING` entry; whether it was armed. One atomic exchange of
/// the entry's first 8 bytes (`armed` and its pad): of the thread's
/// return or exit and the agent's recovery of a thread it found gone (see
/// families/exit.rs `release_gone`), exactly one sees it armed.
#[inline(always)]
pub fn disarm(p: *mut Pending) -> bool {
    // SAFETY: checked map value pointer; the entry holds u64s, so it is
    // 8-byte aligned, and `armed` is its first field.
    let word = unsafe { exchange(core::ptr::addr_of_mut!((*p).armed).cast::<u64>(), 0) };
    // bpfel: `armed` is the low half; the pad is always 0.
    word as u32 == 1
}

/// A call whose return will never run (its thread was killed inside it,
/// or the kernel skipped the return's run and the thread calls again):
/// disarms its entry `p` of a reserving API (an allocation) and gives back
/// what the entry reserved under limits; whether it was armed (a returned
/// call reserves nothing more).
#[inline(always)]
pub fn abandon(tgid: u32, p: *mut Pending) -> bool {
    if !disarm(p) {
        return false;
    }
    // SAFETY: checked map value pointer; the entry keeps the allocation
    // variant, written before it was armed.
    let (slots, reserved) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!((*p).call.alloc.limit_slots)),
            core::ptr::read_volatile(core::ptr::addr_of!((*p).call.alloc.size)),
        )
    };
    limit_usage::release(tgid, slots, reserved);
    true
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
            let _ = abandon((key.pid_tgid >> 32) as u32, slot);
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
