//! Calls in flight: what each thread's call to an API kept at its entry
//! for its return (see `gpumem_common::pending`).
//!
//! Two places keep them:
//! - the thread's own task storage (`TASK_CALLS`), one call at a time: a
//!   lookup there costs a fraction of a hash map's, and the kernel frees
//!   it with the thread. Most calls go there;
//! - `PENDING`, a hash map by thread and API, for the rest: an
//!   allocation that reserved bytes under a limit (a thread killed inside
//!   it must give them back, and where the kernel skipped its exit's run
//!   only the agent can, which reads `PENDING`, see families/exit.rs), a
//!   call made inside another (the slot is taken), a thread the kernel
//!   gave no storage, and every call where the agent turned task storage
//!   off (`TASK_CALLS_ON`, base/task.rs).
//!
//! A return looks in the task's slot first, then in `PENDING`.
use gpumem_common::{stat, CallState, Pending, PendingKey, TaskCall};

use crate::{
    account::limit_usage,
    base::{atomic::exchange, counters::count, task::Task},
    maps::{CALLERS, PENDING, TASK_CALLS},
};

/// The bit of `api` in `TaskCall::in_hash`.
#[inline(always)]
fn bit(api: u32) -> u64 {
    1 << (api & 63)
}

/// Takes the entry-time state of this thread's (`task`'s) call to `api`
/// (and disarms it); None, counted, when there is none (its entry was
/// missed, or the agent forgot it, taking the thread for gone).
#[inline(always)]
pub fn take(task: Task, api: u32) -> Option<Pending> {
    if let Some(t) = TASK_CALLS.existing(task) {
        // SAFETY: checked map value pointer, the current task's own.
        unsafe {
            if (*t).armed == 1 && (*t).api == api {
                (*t).armed = 0;
                return Some(Pending { armed: 1, _pad: 0, call: (*t).call });
            }
            // Else the call is in `PENDING`, taken below.
            (*t).in_hash &= !bit(api);
        }
    }
    let Some(slot) = PENDING.get_ptr_mut(key(task, api)) else {
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

/// Remembers the entry-time state of this thread's (`task`'s) call to
/// `api`: in the thread's task storage where it can, else in `PENDING`
/// (in place when the thread called the API before, else as a new entry,
/// and its process marked as having some, for its threads' exits to
/// remove).
#[inline(always)]
pub fn put(task: Task, api: u32, call: CallState) {
    remember(task, api, call, false, false);
}

/// [`put`] for a call of an API that reserves bytes under limits (an
/// allocation, see `families::alloc::admit_and_remember`, the only one),
/// after the limit decision, which `call` carries; `reserved`: some limit
/// reserved its bytes, so it is kept in `PENDING` (see the module's text).
/// An entry of the same API still armed there is a call whose return the
/// kernel skipped, and what it reserved goes back first. Other APIs'
/// entries never reserve, so their programs leave that out.
#[inline(always)]
pub fn put_reserving(task: Task, api: u32, call: CallState, reserved: bool) {
    remember(task, api, call, true, reserved);
}

/// Keeps the call in the thread's task storage where the slot is free (or
/// holds a call of the same API whose return the kernel skipped, which
/// reserved nothing: overwritten), unless `reserved` or a `PENDING` entry
/// of a reserving API may still be armed (its bit in `in_hash`, cleared
/// when its return takes it): then in `PENDING`, where that entry's
/// reservation goes back first.
#[inline(always)]
fn remember(task: Task, api: u32, call: CallState, reserves: bool, reserved: bool) {
    if !reserved {
        if let Some(t) = TASK_CALLS.current(task) {
            // SAFETY: checked map value pointer, the current task's own.
            unsafe {
                if ((*t).armed == 0 || (*t).api == api) && (*t).in_hash & bit(api) == 0 {
                    arm(t, api, call);
                    return;
                }
            }
        }
    }
    let key = key(task, api);
    if reserves {
        if let Some(t) = TASK_CALLS.current(task) {
            // SAFETY: as above.
            unsafe {
                (*t).in_hash |= bit(api);
                // A call of this API still armed in the slot is one whose
                // return the kernel skipped (it reserved nothing): the
                // return of this one must not take it.
                if (*t).armed == 1 && (*t).api == api {
                    (*t).armed = 0;
                }
            }
        }
    }
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
        if reserves && !keep_in_slot(task, api, call) {
            // Nothing keeps the call for its return: what it reserved goes
            // back now (the return finds no call, and charges nothing).
            // SAFETY: a reserving API's call is the allocation variant.
            let (slots, size) = unsafe { (call.alloc.limit_slots, call.alloc.size) };
            limit_usage::release((key.pid_tgid >> 32) as u32, slots, size);
        }
        return;
    }
    let _ = CALLERS.insert((key.pid_tgid >> 32) as u32, 1, 0);
}

/// A reserving call `PENDING` has no room for, kept in the thread's task
/// storage instead where its slot is free, for the return to commit or
/// roll back what it reserved (a thread killed inside the call then leaves
/// its reservation behind: what only `PENDING` gives back); whether kept.
#[inline(always)]
fn keep_in_slot(task: Task, api: u32, call: CallState) -> bool {
    let Some(t) = TASK_CALLS.current(task) else { return false };
    // SAFETY: checked map value pointer, the current task's own.
    unsafe {
        if (*t).armed == 1 && (*t).api != api {
            return false; // a call this one is made inside of
        }
        // No `PENDING` entry of this API is armed: the insert found none.
        (*t).in_hash &= !bit(api);
        arm(t, api, call);
    }
    true
}

/// Keeps `call` of `api` in the thread's slot `t`, armed for its return.
///
/// # Safety
/// `t` is the current task's checked `TASK_CALLS` value pointer.
#[inline(always)]
unsafe fn arm(t: *mut TaskCall, api: u32, call: CallState) {
    // SAFETY: the caller's promise; only the task's own programs touch it.
    unsafe {
        (*t).api = api;
        (*t).call = call;
        (*t).armed = 1;
    }
}

#[inline(always)]
fn key(task: Task, api: u32) -> PendingKey {
    PendingKey { pid_tgid: task.pid_tgid(), api, _pad: 0 }
}
