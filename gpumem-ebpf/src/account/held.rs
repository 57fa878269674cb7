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
//! - a charge or free changes an amount with one fetch-add, and the value
//!   it replaced says which came first: what it added before the exchange,
//!   the release took with the rest; an add after it lands on the `TAKEN`
//!   mark (read by nobody), and the charge or free leaves the cgroup total
//!   and the limit's usage to the release.
//!
//! Each byte is thus given back once: by the free or by the release.
//! The released entry is not deleted while a thread of the process may
//! still be inside a program (families/exit.rs): the preallocated map
//! would hand its element to another process's first charge at once, and
//! a change made through a pointer looked up before the delete would land
//! in that process's entry (a free's there gave the same bytes back twice:
//! a limit's usage below zero on 7.2, whose uprobe programs can be
//! preempted). Kept, the released entry takes such late changes on its
//! `TAKEN` marks.
use crate::base::atomic::{compare_exchange, exchange, fetch_add};

/// Set in a claimed process's generation.
pub const RELEASED: u64 = gpumem_common::ProcUsage::RELEASED;

/// What a taken amount holds: bit 63 (`RELEASED`) marks it; bit 62 keeps
/// bit 63 set should a contended change (below) still add to it.
const TAKEN: u64 = 3 << 62;

/// Adds `delta` (wrapping: may be negative) to a held amount unless its
/// process was released; true if it changed.
///
/// One atomic fetch-add: the value it replaced says which came first. An
/// add that lands after the release's exchange changes only the `TAKEN`
/// mark (which nobody reads again, and which keeps bit 63 whatever is
/// added to it) and reports false.
#[inline(always)]
pub fn change(p: *mut u64, delta: u64) -> bool {
    // SAFETY: `p` points into a checked map value, 8-byte aligned.
    unsafe { fetch_add(p, delta) & RELEASED == 0 }
}

/// [`change`]s the amount paired with `key` among the `n` (id, amount)
/// pairs at `ids` and `amounts`, claiming a free id (0) for it if it has
/// none (racing claimers agree through compare-exchange): the pair's index
/// and whether the amount changed, or None when every id is another key's.
///
/// The change is made here rather than at an index returned to the
/// caller: that index, a different exact value on each path, was carried
/// through the caller's code and kept the verifier from merging the paths
/// (`alloc_return`: 57k -> 47k instructions processed at load).
#[inline(always)]
pub fn change_keyed(ids: *mut u64, amounts: *mut u64, n: usize, key: u64, delta: u64) -> Option<(u32, bool)> {
    let mut i = 0;
    while i < n {
        // SAFETY: `i < n`, within the caller's arrays in a checked map value.
        let id = unsafe { ids.add(i) };
        // SAFETY: as above.
        let cur = unsafe { core::ptr::read_volatile(id) };
        let mine = cur == key
            || (cur == 0 && {
                // SAFETY: as above.
                let found = unsafe { compare_exchange(id, 0, key) };
                found == 0 || found == key
            });
        if mine {
            // SAFETY: as above.
            let amount = unsafe { amounts.add(i) };
            return Some((i as u32, change(amount, delta)));
        }
        i += 1;
    }
    None
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
    // SAFETY: as above.
    let found = unsafe { compare_exchange(generation, g, g | RELEASED) };
    (found == g).then_some(g)
}

/// The image a raw generation belongs to, released or not.
#[inline(always)]
pub fn image(generation: u64) -> u64 {
    generation & !RELEASED
}
