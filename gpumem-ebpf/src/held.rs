//! What a process holds per cgroup and per limit (`ProcUsage`'s
//! `cgroup_bytes` and `limit_bytes`), and how its release takes them
//! without racing the process's own charges and frees.
//!
//! A release (exit, exec, or the agent's release of a gone process) can run
//! on one CPU while a thread of the same process charges or frees on
//! another (a killed group's threads are still returning from the driver).
//! A snapshot would let both sides give the same bytes back (a cgroup total
//! below zero) or neither. Instead:
//! - the release first claims the process: its generation gets the
//!   `RELEASED` bit by compare-exchange, so of two releases one goes on;
//! - it then exchanges each amount for `TAKEN` in one atomic step and gives
//!   back exactly what it took;
//! - a charge or free changes an amount by compare-exchange and only when
//!   it is not `TAKEN`: what it changed before the exchange, the release
//!   took with the rest; after it, the charge or free leaves the cgroup
//!   total and the limit's usage to the release.
//!
//! Each byte is thus given back once: by the free or by the release.
//! Known gap: the released entry is deleted, and the preallocated map may
//! hand its element to another process's first charge at once; a charge
//! that looked the entry up just before the delete and changes it just
//! after that reuse lands in the other process's entry (a window of a few
//! instructions, on top of a race with an exit).
use crate::atomic::{compare_exchange, exchange, CAS_TRIES};

/// Set in a claimed process's generation.
pub const RELEASED: u64 = 1 << 63;

/// What a taken amount holds: bit 63 (`RELEASED`) marks it; bit 62 keeps
/// bit 63 set should a contended change (below) still add to it.
const TAKEN: u64 = 3 << 62;

/// Adds `delta` (wrapping: may be negative) to a held amount unless its
/// process was released; true if it changed.
///
/// Contended beyond the compare-exchange retries, the add happens anyway
/// (atomically) and the amount is read back: then a release racing in
/// between those two steps is not seen (both are rare; together, rarer).
#[inline(always)]
pub fn change(p: *mut u64, delta: u64) -> bool {
    // SAFETY: `p` points into a checked map value, 8-byte aligned.
    let mut cur = unsafe { core::ptr::read_volatile(p) };
    let mut i = 0;
    while i < CAS_TRIES {
        if cur & RELEASED != 0 {
            return false;
        }
        let found = unsafe { compare_exchange(p, cur, cur.wrapping_add(delta)) };
        if found == cur {
            return true;
        }
        cur = found;
        i += 1;
    }
    unsafe { crate::atomic::add_nofetch(p, delta) };
    (unsafe { core::ptr::read_volatile(p) } & RELEASED) == 0
}

/// Takes a held amount for the process's release: what it held (0 if it
/// was taken already).
#[inline(always)]
pub fn take(p: *mut u64) -> u64 {
    // SAFETY: as for `change`.
    let held = unsafe { exchange(p, TAKEN) };
    if held & RELEASED != 0 {
        0
    } else {
        held
    }
}

/// Claims the release of a process whose generation is at `generation`:
/// the image's generation if this caller won it, None if the process was
/// claimed already.
#[inline(always)]
pub fn claim_release(generation: *mut u64) -> Option<u64> {
    // SAFETY: as for `change`.
    let g = unsafe { core::ptr::read_volatile(generation) };
    if g & RELEASED != 0 {
        return None;
    }
    (unsafe { compare_exchange(generation, g, g | RELEASED) } == g).then_some(g)
}

/// The image a raw generation belongs to, released or not.
#[inline(always)]
pub fn image(generation: u64) -> u64 {
    generation & !RELEASED
}
