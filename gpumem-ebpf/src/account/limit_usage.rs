//! Bytes counted under each limit (`LIMIT_STATE`, and a declaring
//! process's own in `DECLARED`, see declared.rs): reserved at a call's
//! entry by the limit decision (`limits.rs`), committed at the size the
//! driver charged or rolled back at its return, given back by frees and by
//! the process's release (each byte once, see held.rs). `tgid` is always
//! the process the limits are of.
use gpumem_common::{limit_list, ProcUsage, LIMITS_PER_CALL, MAX_LIMITS, PROC_LIMIT_SLOTS};

use crate::{
    account::{declared, held},
    base::{atomic::add_nofetch, bounded},
    maps::{LIMITS, LIMIT_BASE, LIMIT_STATE},
};

/// Adds `delta` (wrapping: may be negative) to every limit in `slots`;
/// re-arms soft-limit records when usage falls back under them.
#[inline(always)]
pub fn adjust(tgid: u32, slots: u64, delta: u64) {
    if slots == 0 || delta == 0 {
        return;
    }
    declared::adjust(tgid, slots, delta);
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        if let Some(slot) = limit_list::at(slots, i) {
            adjust_slot(slot, delta);
        }
        i += 1;
    }
}

/// [`adjust`] for the one limit in `LIMITS` slot `slot`: what the
/// per-limit bookkeeping gives back, a limit at a time. Through
/// [`adjust`] (a list of one) the verifier walked the list's other three
/// places too, at each of the bookkeeping's sixteen places.
#[inline(always)]
fn adjust_slot(slot: u32, delta: u64) {
    let (Some(rule), Some(state)) = (LIMITS.get_ptr(slot), LIMIT_STATE.get_ptr_mut(slot)) else {
        return;
    };
    // SAFETY: checked map value pointers.
    let usage = unsafe { core::ptr::addr_of_mut!((*state).usage) };
    // SAFETY: as above.
    unsafe { add_nofetch(usage, delta) };
    // SAFETY: as above.
    let soft = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*rule).soft)) };
    let base = LIMIT_BASE.get(slot).copied().unwrap_or(0);
    // SAFETY: as above.
    if soft != 0 && unsafe { core::ptr::read_volatile(usage) }.wrapping_add(base) <= soft {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*state).soft_over), 0) };
    }
}

/// Releases `size` bytes from every limit in `slots`.
#[inline(always)]
pub fn release(tgid: u32, slots: u64, size: u64) {
    adjust(tgid, slots, size.wrapping_neg());
}

/// After a charge of `size` under the limits in `slots` (reserved at the
/// call's entry): counts it as held by the process, for its release. Where
/// the release took the process's part first, nothing holds the bytes: the
/// reservation goes back.
#[inline(always)]
pub fn commit(tgid: u32, proc: *mut ProcUsage, slots: u64, size: u64) {
    hold(tgid, proc, slots, size, true);
}

/// After a free of `size` bytes held under the limits in `slots`: gives
/// them back, unless the process's release took them first.
#[inline(always)]
pub fn uncommit(tgid: u32, proc: *mut ProcUsage, slots: u64, size: u64) {
    hold(tgid, proc, slots, size, false);
}

/// Changes what the process holds under each limit of `slots` by `size`
/// (more if `charge`, less if not), claiming its per-limit amounts as
/// needed; see held.rs for the release it may race. A limit with no
/// amount left for it in the process (all taken by other limits) counts as
/// held: it keeps the reservation until the free. The process's own
/// declared limits need no amount: they go with the process (a free gives
/// back to them, a charge keeps its reservation).
#[inline(always)]
fn hold(tgid: u32, proc: *mut ProcUsage, slots: u64, size: u64, charge: bool) {
    if slots == 0 {
        return; // no limit applies: the common case, and cheap
    }
    if !charge {
        declared::adjust(tgid, slots, size.wrapping_neg());
    }
    let delta = if charge { size } else { size.wrapping_neg() };
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        if let Some(slot) = limit_list::at(slots, i) {
            // SAFETY: checked map value pointer.
            let (ids, amounts) = unsafe {
                (core::ptr::addr_of_mut!((*proc).limit_slots), core::ptr::addr_of_mut!((*proc).limit_bytes))
            };
            let held =
                held::change_keyed(ids.cast(), amounts.cast(), PROC_LIMIT_SLOTS, slot as u64 + 1, delta)
                    .is_none_or(|(_, changed)| changed);
            // A charge the release beat holds nothing; a free that beat the
            // release gives back its own bytes.
            if held != charge {
                adjust_slot(slot, size.wrapping_neg());
            }
        }
        i += 1;
    }
}

/// At the process's release (exit.rs, once claimed): takes what it holds
/// under each limit and gives that back.
#[inline(always)]
pub fn release_process(proc: *mut ProcUsage) {
    let mut pair = 0;
    while pair < PROC_LIMIT_SLOTS {
        let pair_at = bounded(pair, PROC_LIMIT_SLOTS);
        // SAFETY: checked map value pointer; the id read after the take
        // sees any claim made by a change the take included.
        let taken = held::take(unsafe { core::ptr::addr_of_mut!((*proc).limit_bytes[pair_at]) });
        // SAFETY: as above.
        let id = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*proc).limit_slots[pair_at])) };
        if id != 0 && id <= MAX_LIMITS as u64 && taken != 0 {
            adjust_slot(id as u32 - 1, taken.wrapping_neg());
        }
        pair += 1;
    }
}
