//! The calling process's own declared limits (`DECLARED`, read from its
//! environment at exec by families/declare.rs): what the limit decision
//! and the accounting see of them. Each counts only this process's
//! memory, so nothing of it outlives the process: its exit removes the
//! entry, and with it every count, rather than giving bytes back. A call
//! reserved under them says so in its list's bytes 4 and 5 (see
//! `limit_list::with_declared`), apart from the agent's rules, so the
//! verifier walks them once, not once per place in the list.
use gpumem_common::{
    declare::{declared::Declared, names::DEVICES},
    limit_list, LimitRule, LimitState, DEVICE_ANY,
};

use crate::{
    base::{atomic::add_nofetch, bounded},
    maps::DECLARED,
};

/// The process's limit over all devices (or the one it names), where it
/// counts `device`.
#[inline(always)]
pub fn total(d: *mut Declared, device: u32) -> Option<(LimitRule, *mut LimitState)> {
    // SAFETY: a checked map value pointer (the caller's); read once.
    let r = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*d).total)) };
    let counts = r.active != 0 && (r.device == DEVICE_ANY || r.device == device);
    // SAFETY: as above.
    counts.then(|| (r, unsafe { core::ptr::addr_of_mut!((*d).total_state) }))
}

/// The process's own limit of `device`, where it declared one.
#[inline(always)]
pub fn of_device(d: *mut Declared, device: u32) -> Option<(LimitRule, *mut LimitState)> {
    // SAFETY: a checked map value pointer (the caller's).
    let rule = unsafe { (*d).device_rule(device) }?;
    let at = bounded(device as usize, DEVICES);
    // SAFETY: as above, the index masked to the array.
    Some((rule, unsafe { core::ptr::addr_of_mut!((*d).each_state[at]) }))
}

/// Adds `delta` (wrapping: may be negative) to the declared limits of
/// process `tgid` that `list` is reserved under; re-arms the soft limit's
/// record when usage falls back under it.
#[inline(always)]
pub fn adjust(tgid: u32, list: u64, delta: u64) {
    let (bits, device) = limit_list::declared(list);
    if bits == 0 {
        return;
    }
    let Some(d) = DECLARED.get_ptr_mut(tgid) else { return };
    if bits & limit_list::DECLARED_TOTAL_BIT != 0 {
        // SAFETY: checked map value pointer.
        let (state, soft) = unsafe { (core::ptr::addr_of_mut!((*d).total_state), (*d).total.soft) };
        add(state, delta, soft);
    }
    if bits & limit_list::DECLARED_DEVICE_BIT != 0 {
        let at = bounded(device as usize, DEVICES);
        // SAFETY: as above, the index masked to the array.
        add(unsafe { core::ptr::addr_of_mut!((*d).each_state[at]) }, delta, 0);
    }
}

#[inline(always)]
fn add(state: *mut LimitState, delta: u64, soft: u64) {
    // SAFETY: a checked map value pointer (the caller's).
    let usage = unsafe { core::ptr::addr_of_mut!((*state).usage) };
    // SAFETY: as above.
    unsafe { add_nofetch(usage, delta) };
    // SAFETY: as above.
    if soft != 0 && unsafe { core::ptr::read_volatile(usage) } <= soft {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*state).soft_over), 0) };
    }
}
