//! Live allocations by (process, namespace, address): where a charge is
//! kept from its allocation to its free, so that the free uncharges what
//! was charged. Every insert and removal of the two maps below is made
//! here; vmm.rs changes a handle's counts in place ([`handle`]).
//!
//! Two maps hold them. `LIVE_TABLE` (an open-addressed array,
//! `gpumem_common::LiveSlot`) takes every allocation but VMM handles: its
//! lookups are inlined, with no bucket lock and no memory to allocate, so
//! an insert and a take cost a fraction of a hash map's. `LIVE` (a hash
//! map) keeps VMM handles (changed in place by the mappings, vmm.rs), an
//! allocation whose slots are all taken, and an earlier build's entries
//! after a takeover; `LIVE_SPILLED` says whether it may hold any
//! allocation but a VMM handle, so that the table's callers look there
//! only then.
//!
//! A slot is claimed by compare-exchange on its state word, whose sequence
//! changes at every claim: two takes of one address (two threads freeing
//! it at once) claim it once, and a slot emptied and filled again between
//! a reader's look and its claim is not claimed.
use aya_ebpf::bindings::BPF_NOEXIST;
use gpumem_common::{
    live_slot, live_slot_scattered, ns, slot_state, spilled, stat, LiveAlloc, LiveKey, LiveSlot, LIVE_PROBES,
    LIVE_SLOTS,
};

use crate::{
    account::usage,
    base::{
        atomic::{add_nofetch, compare_exchange, store_release},
        counters::count,
    },
    maps::{LIVE, LIVE_SPILLED, LIVE_TABLE},
};

/// What [`insert`] did. (No payload: an enum's unused payload is
/// undefined to the compiler, and a register copied from it fails the
/// verifier.)
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// The key was new.
    New,
    /// An entry was at the key already, an allocation whose free gpumem
    /// never saw: replaced, and copied out.
    Replaced,
    /// No room: nothing kept (counted in `stat::MAP_FULL`).
    Full,
}

/// Keeps `live` at `key`; an allocation found there already goes to
/// `stale`.
#[inline(always)]
pub fn insert(key: LiveKey, live: &LiveAlloc, stale: &mut LiveAlloc) -> Put {
    if key.ns == ns::VMM_HANDLE {
        return insert_hashed(key, live, stale);
    }
    let first = first_slot(&key);
    // Two empty slots, so that losing one to another CPU's insert does not
    // send this one to the hash map.
    let mut free: *mut LiveSlot = core::ptr::null_mut();
    let mut other: *mut LiveSlot = core::ptr::null_mut();
    let mut free_state = 0;
    // Tested at its end: as a `for` loop LLVM laid it out with the body's
    // last instruction falling through into the test, a back edge kernel
    // 6.1 refuses ("back-edge from insn"); gpumem-user's bpf/back_edges.rs
    // checks the objects for any such edge.
    let mut i = 0;
    loop {
        if let Some(slot) = slot_at(first.wrapping_add(i)) {
            let state = state_of(slot);
            let tag = state & slot_state::TAG;
            if tag == slot_state::FULL && key_of(slot) == key && swap(slot, state, &key, live, stale) {
                return Put::Replaced;
            }
            if tag == slot_state::EMPTY {
                if free.is_null() {
                    (free, free_state) = (slot, state);
                } else if other.is_null() {
                    other = slot;
                }
            }
        }
        i += 1;
        if i == LIVE_PROBES {
            break;
        }
    }
    let found = spilled() && take_hashed(key, stale);
    let put = if found { Put::Replaced } else { Put::New };
    if !free.is_null() && fill(free, free_state, &key, live) {
        return put;
    }
    if !other.is_null() {
        let state = state_of(other);
        if state & slot_state::TAG == slot_state::EMPTY && fill(other, state, &key, live) {
            return put;
        }
    }
    // The key's slots are taken: the hash map keeps it, counted first so
    // that every reader looks there until it is gone.
    let mut kept = *live;
    kept.retained = spilled::COUNTED;
    let counted = count_spilled(1);
    let mut replaced = LiveAlloc::default();
    let put_hashed = insert_hashed(key, &kept, &mut replaced);
    if put_hashed == Put::Full || (put_hashed == Put::Replaced && replaced.retained == spilled::COUNTED) {
        // Nothing more in `LIVE` than before.
        if counted {
            count_spilled(u64::MAX);
        }
    }
    replaced.retained = 0;
    match put_hashed {
        // The stale entry taken out above is dropped all the same.
        Put::Full if !found => Put::Full,
        Put::Replaced if !found => {
            *stale = replaced;
            Put::Replaced
        }
        _ => put,
    }
}

/// Takes the allocation at `key` out into `live`; whether there was one.
/// Of two threads freeing one address at once, only the one whose claim
/// (or the hash map's removal) succeeds holds it: it alone uncharges it
/// (or, at a refused return, puts it back).
#[inline(always)]
pub fn take(key: LiveKey, live: &mut LiveAlloc) -> bool {
    if key.ns != ns::VMM_HANDLE {
        let first = first_slot(&key);
        for i in 0..LIVE_PROBES {
            let Some(slot) = slot_at(first.wrapping_add(i)) else { continue };
            let state = state_of(slot);
            if state & slot_state::TAG == slot_state::FULL
                && key_of(slot) == key
                && empty(slot, state, &key, live)
            {
                return true;
            }
        }
        if !spilled() {
            return false;
        }
    }
    take_hashed(key, live)
}

/// Forgets the entry at `key` in `LIVE` (a VMM handle, or an allocation
/// kept there) if it is of image `generation` and that image has exited
/// or exec'd: its charge went at its release, and nothing of its process
/// will free it. Whether it did. The agent finds such entries (see
/// families/exit.rs `forget_dead`); the check is made here, at the
/// moment of the removal: an entry of another image (the key reused by
/// the process's current image since the agent looked) is left alone, and
/// one found replaced between the look and the removal is put back. Left
/// open: a replacement between `take_hashed`'s copy and its removal (a
/// few instructions) would be removed and not put back, which needs an
/// exec'd image to reuse the dead entry's address at that moment.
#[inline(always)]
pub fn forget_dead(key: LiveKey, generation: u64) -> bool {
    // SAFETY: read once, through the checked pointer.
    let seen = LIVE.get_ptr(key).map(|e| unsafe { (*e).generation });
    if seen != Some(generation) || usage::image_alive(key.tgid, generation) {
        return false;
    }
    let mut found = LiveAlloc::default();
    if !take_hashed(key, &mut found) {
        return false;
    }
    if found.generation == generation {
        return true;
    }
    keep(key, &found);
    false
}

/// Keeps `live` at `key`, replacing whatever is there: an allocation
/// [`take`] took out put back (the driver refused its free), a VMM handle
/// put back changed (a release of one of its references, or of the handle
/// while still mapped), a multicast handle.
#[inline(always)]
pub fn keep(key: LiveKey, live: &LiveAlloc) {
    let mut ignored = LiveAlloc::default();
    let _ = insert(key, live, &mut ignored);
}

/// The VMM handle's entry at `key`, to change in place (its mappings and
/// references), where gpumem saw the handle created.
#[inline(always)]
pub fn handle(key: LiveKey) -> Option<*mut LiveAlloc> {
    LIVE.get_ptr_mut(key)
}

/// The slots in use less one: `LIVE_SLOTS - 1`, or fewer where a test
/// asks for a small table (`GPUMEM_LIVE_SLOTS`, set by the loader).
/// Read-only data: the verifier knows it.
#[no_mangle]
static LIVE_MASK: u32 = LIVE_SLOTS - 1;

/// 1 where a key's first slot is by region (`live_slot`); 0 where the
/// table was made by a build of the layout before (taken over, see
/// `gpumem_common::handover::SCATTERED_SLOTS_LAYOUT`) and its slots are
/// placed as that build placed them. Read-only data the loader sets: the
/// verifier knows it, and never walks the other placement.
#[no_mangle]
static LIVE_SLOTS_BY_REGION: u8 = 1;

#[inline(always)]
fn first_slot(key: &LiveKey) -> u32 {
    // SAFETY: a read of read-only data the loader set.
    if unsafe { core::ptr::read_volatile(&LIVE_SLOTS_BY_REGION) } != 0 {
        live_slot(key)
    } else {
        live_slot_scattered(key)
    }
}

#[inline(always)]
fn slot_at(index: u32) -> Option<*mut LiveSlot> {
    // SAFETY: a read of read-only data the loader set.
    let mask = unsafe { core::ptr::read_volatile(&LIVE_MASK) };
    LIVE_TABLE.get_ptr_mut(index & mask & (LIVE_SLOTS - 1))
}

#[inline(always)]
fn state_of(slot: *mut LiveSlot) -> u64 {
    // SAFETY: `slot` is a live-table value; volatile, so that the key is
    // read after it.
    unsafe { core::ptr::addr_of!((*slot).state).read_volatile() }
}

#[inline(always)]
fn key_of(slot: *mut LiveSlot) -> LiveKey {
    // SAFETY: as for `state_of`.
    unsafe { core::ptr::addr_of!((*slot).key).read_volatile() }
}

/// Claims `slot` if its state is still `seen`; the claimed state.
#[inline(always)]
fn claim(slot: *mut LiveSlot, seen: u64) -> Option<u64> {
    let claimed = slot_state::claimed(seen);
    // SAFETY: the state word of a live-table value, 8-byte aligned.
    let found = unsafe { compare_exchange(core::ptr::addr_of_mut!((*slot).state), seen, claimed) };
    (found == seen).then_some(claimed)
}

/// Ends a claim: `slot`'s state becomes `claimed` released as `tag`, by
/// a release store (`store_release`), so the slot's contents are written,
/// and read, before another CPU (or the agent, through its mapping) sees
/// the state. No one else changes a claimed slot's state (every other
/// claim expects the state it saw unclaimed), so a store suffices where
/// a locked exchange took about 10 ns a pair's insert and free.
#[inline(always)]
fn release(slot: *mut LiveSlot, claimed: u64, tag: u64) {
    // SAFETY: as for `claim`.
    unsafe { store_release(core::ptr::addr_of_mut!((*slot).state), slot_state::released(claimed, tag)) };
}

/// Claims the full `slot` (state `seen`) holding `key`; None where another
/// CPU claimed it first, or it holds another key by the time it is
/// claimed (a look that raced a refill: released as it was).
#[inline(always)]
fn claim_key(slot: *mut LiveSlot, seen: u64, key: &LiveKey) -> Option<u64> {
    let claimed = claim(slot, seen)?;
    if key_of(slot) != *key {
        release(slot, claimed, slot_state::FULL);
        return None;
    }
    Some(claimed)
}

/// Fills the empty `slot` (state `seen`) with `live` at `key`; false where
/// another CPU claimed it first.
#[inline(always)]
fn fill(slot: *mut LiveSlot, seen: u64, key: &LiveKey, live: &LiveAlloc) -> bool {
    let Some(claimed) = claim(slot, seen) else { return false };
    // SAFETY: claimed: this program alone writes the slot until released.
    unsafe {
        (*slot).key = *key;
        (*slot).live = *live;
    }
    release(slot, claimed, slot_state::FULL);
    true
}

/// Takes the allocation at `key` out of the full `slot` (state `seen`)
/// into `out` and empties the slot; false where another CPU claimed it
/// first, or it holds another key by the time it is claimed (a look that
/// raced a refill).
#[inline(always)]
fn empty(slot: *mut LiveSlot, seen: u64, key: &LiveKey, out: &mut LiveAlloc) -> bool {
    let Some(claimed) = claim_key(slot, seen, key) else { return false };
    // SAFETY: claimed, as in `fill`.
    *out = unsafe { (*slot).live };
    release(slot, claimed, slot_state::EMPTY);
    true
}

/// Replaces the allocation at `key` in the full `slot` (state `seen`) with
/// `live`, the one replaced copied to `stale`; false as for [`empty`].
#[inline(always)]
fn swap(slot: *mut LiveSlot, seen: u64, key: &LiveKey, live: &LiveAlloc, stale: &mut LiveAlloc) -> bool {
    let Some(claimed) = claim_key(slot, seen, key) else { return false };
    // SAFETY: claimed, as in `fill`.
    unsafe {
        *stale = (*slot).live;
        (*slot).live = *live;
    }
    release(slot, claimed, slot_state::FULL);
    true
}

/// Whether `LIVE` may hold an allocation that is not a VMM handle.
#[inline(always)]
fn spilled() -> bool {
    let set = |i| LIVE_SPILLED.get(i).is_some_and(|s| *s != 0);
    set(spilled::COUNT) || set(spilled::OLD)
}

/// Adds `by` (1, or -1 as a u64) to the count of allocations in `LIVE`;
/// whether it could.
#[inline(always)]
fn count_spilled(by: u64) -> bool {
    match LIVE_SPILLED.get_ptr_mut(spilled::COUNT) {
        Some(c) => {
            // SAFETY: the count's array value, 8-byte aligned.
            unsafe { add_nofetch(c, by) };
            true
        }
        None => false,
    }
}

/// `insert` in the hash map: one walk of its bucket where the key is new
/// (a lookup first, then an insert, walked it twice: about 120 ns).
#[inline(always)]
fn insert_hashed(key: LiveKey, live: &LiveAlloc, stale: &mut LiveAlloc) -> Put {
    match LIVE.insert(key, live, u64::from(BPF_NOEXIST)) {
        Ok(()) => Put::New,
        Err(e) if e == -EEXIST => {
            // SAFETY: copied out before it is replaced.
            let put = match unsafe { LIVE.get(key) } {
                Some(found) => {
                    *stale = *found;
                    Put::Replaced
                }
                None => Put::New,
            };
            if LIVE.insert(key, live, 0).is_err() {
                // The entry found stays as it was: nothing of it dropped.
                count(stat::MAP_FULL);
                return Put::Full;
            }
            put
        }
        Err(_) => {
            count(stat::MAP_FULL);
            Put::Full
        }
    }
}

/// Takes the allocation at `key` out of the hash map into `out`; whether
/// there was one (and this removal took it).
#[inline(always)]
fn take_hashed(key: LiveKey, out: &mut LiveAlloc) -> bool {
    // SAFETY: copied out before removal.
    let Some(mut found) = (unsafe { LIVE.get(key) }).copied() else { return false };
    if LIVE.remove(key).is_err() {
        return false;
    }
    if key.ns != ns::VMM_HANDLE && found.retained == spilled::COUNTED {
        found.retained = 0;
        count_spilled(u64::MAX);
    }
    *out = found;
    true
}

/// The kernel's `EEXIST`, as the map helpers return it (negated).
const EEXIST: i32 = 17;
