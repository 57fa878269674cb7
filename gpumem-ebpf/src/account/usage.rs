//! Charging and uncharging what processes and cgroups hold (`PROC_USAGE`,
//! `CGROUP_USAGE`), and the limits' share of it (`limit_usage`).
//!
//! Totals are updated with atomic fetch-and-add, so concurrent threads and
//! processes never lose an update, and each record carries the exact total
//! its own update produced.
use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns, maps::HashMap};
use gpumem_common::{stat, LiveAlloc, ProcUsage, NO_SLOT, PROC_CGROUP_SLOTS};

use crate::{
    account::{held, limit_usage},
    base::{
        atomic::{add, sub},
        bounded,
        counters::count,
    },
    maps::{CGROUP_USAGE, PROC_FRESH, PROC_USAGE},
};

/// The value at `key`, created as `init` when absent (a full map counted).
#[inline(always)]
pub fn get_or_insert<K, V>(map: &HashMap<K, V>, key: &K, init: &V) -> Option<*mut V> {
    if let Some(p) = map.get_ptr_mut(key) {
        return Some(p);
    }
    // BPF_NOEXIST: a racing thread may have created it; either way look up.
    let _ = map.insert(key, init, 1);
    let p = map.get_ptr_mut(key);
    if p.is_none() {
        count(stat::MAP_FULL);
    }
    p
}

/// Process `tgid`'s usage entry, made at its first charge (a full map
/// counted). [`get_or_insert`]'s steps, written out: shared with it
/// through a function taking the making as a closure, `alloc_return`'s
/// verification took 2,200 instructions more (28,127 -> 30,332).
#[inline(always)]
fn proc_entry(tgid: u32) -> Option<*mut ProcUsage> {
    if let Some(p) = PROC_USAGE.get_ptr_mut(tgid) {
        return Some(p);
    }
    new_proc(tgid);
    let p = PROC_USAGE.get_ptr_mut(tgid);
    if p.is_none() {
        count(stat::MAP_FULL);
    }
    p
}

/// Makes process `tgid`'s entry, its generation the time now, unless a
/// racing thread made it first. A function of its own: built in the
/// caller, its 144 bytes were zeroed and the clock read at every charge
/// (28 ns a pair), and where built only when missing, its stack slots,
/// written on one path, kept the verifier from pruning (45,169 -> 65,081
/// instructions for `alloc_return`). The value is built in this CPU's
/// `PROC_FRESH` (on the stack its 144 bytes took `alloc_return`'s deepest
/// calls to 496 of the verifier's 512), whose other fields stay zero. A
/// task preempted between the write and the insert may insert the
/// generation another process's first charge wrote there meanwhile: a
/// time as fresh, and still not that of this process's image before
/// (whose release came before this charge), which is what matters.
#[inline(never)]
fn new_proc(tgid: u32) {
    let Some(fresh) = PROC_FRESH.get_ptr_mut(0) else { return };
    // SAFETY: a checked map value pointer; the helper call is plain.
    // The value is passed by reference, as the map memory it is: by value
    // (what clippy asks for) it would be copied to the stack again.
    #[allow(clippy::needless_borrows_for_generic_args)]
    unsafe {
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*fresh).generation), bpf_ktime_get_ns() | 1);
        let _ = PROC_USAGE.insert(tgid, &*fresh, u64::from(BPF_NOEXIST));
    }
}

/// Totals after a charge or uncharge, the cgroup slot used, and the
/// process's generation.
pub struct Totals {
    pub proc_total: u64,
    pub cgroup_total: u64,
    pub slot: u32,
    pub generation: u64,
}

/// The generation in a process's usage entry, with `held::RELEASED` set
/// once its release has begun.
#[inline(always)]
fn generation_at(proc: *const ProcUsage) -> u64 {
    // SAFETY: `proc` is a checked map value pointer.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*proc).generation)) }
}

/// Whether a live entry was charged to the image of `generation` (a raw
/// one: an image being released matches nothing).
#[inline(always)]
fn of_image(live: &LiveAlloc, generation: u64) -> bool {
    live.generation != 0 && live.generation == generation
}

/// Charges `size` bytes to process `tgid` and cgroup `cgroup_id`, and
/// counts them as the process's under the limits in `limit_slots` (which
/// reserved them at the call's entry). A charge that races its process's
/// release and loses (see held.rs) leaves the cgroup and the limits as
/// they were.
#[inline(always)]
pub fn charge(tgid: u32, cgroup_id: u64, size: u64, limit_slots: u64) -> Totals {
    let mut t = Totals { proc_total: 0, cgroup_total: 0, slot: NO_SLOT, generation: 0 };
    // The cgroup first, and undone below if need be: its total is never
    // below what its processes hold.
    let cg = get_or_insert(&CGROUP_USAGE, &cgroup_id, &0);
    if let Some(cg) = cg {
        t.cgroup_total = add(cg, size);
    }
    let Some(proc) = proc_entry(tgid) else {
        limit_usage::release(tgid, limit_slots, size);
        return t;
    };
    t.generation = held::image(generation_at(proc));
    // SAFETY: checked map value pointer.
    t.proc_total = add(unsafe { core::ptr::addr_of_mut!((*proc).bytes) }, size);
    // SAFETY: checked map value pointer.
    let (ids, amounts) = unsafe {
        (core::ptr::addr_of_mut!((*proc).cgroup_ids), core::ptr::addr_of_mut!((*proc).cgroup_bytes))
    };
    match held::change_keyed(ids.cast(), amounts.cast(), PROC_CGROUP_SLOTS, cgroup_id, size) {
        Some((slot, changed)) => {
            // Hidden from the verifier: known exactly on each of the four
            // paths, the slot kept them apart through the rest.
            t.slot = core::hint::black_box(slot) & (PROC_CGROUP_SLOTS as u32 - 1);
            if !changed {
                if let Some(cg) = cg {
                    t.cgroup_total = sub(cg, size);
                }
            }
        }
        None => count(stat::CGROUP_SLOTS_FULL),
    }
    limit_usage::commit(tgid, proc, limit_slots, size);
    t
}

/// Uncharges live allocation `live` (from the process, its cgroup and its
/// limits) if it belongs to process `tgid`'s current image (see
/// `LiveAlloc::generation`); None (nothing changed) if it does not. Where
/// the process's release took the bytes first, only the process total
/// changes.
#[inline(always)]
pub fn uncharge_current(tgid: u32, live: &LiveAlloc) -> Option<Totals> {
    let proc = PROC_USAGE.get_ptr_mut(tgid)?;
    if !of_image(live, generation_at(proc)) {
        return None;
    }
    let mut t = Totals { proc_total: 0, cgroup_total: 0, slot: live.cgroup_slot, generation: 0 };
    let size = live.size;
    // SAFETY: checked map value pointer.
    t.proc_total = sub(unsafe { core::ptr::addr_of_mut!((*proc).bytes) }, size);
    let slot = live.cgroup_slot as usize;
    let held = slot >= PROC_CGROUP_SLOTS || {
        let slot = bounded(slot, PROC_CGROUP_SLOTS);
        // SAFETY: checked map value pointer, index masked to the array.
        held::change(unsafe { core::ptr::addr_of_mut!((*proc).cgroup_bytes[slot]) }, size.wrapping_neg())
    };
    // The cgroup before the limits: a limit never admits a call while its
    // cgroup's total still counts what the limit gave back.
    if let Some(cg) = CGROUP_USAGE.get_ptr_mut(live.cgroup_id) {
        // SAFETY: checked map value pointer.
        t.cgroup_total = if held { sub(cg, size) } else { unsafe { core::ptr::read_volatile(cg) } };
    }
    limit_usage::uncommit(tgid, proc, live.limit_slots, size);
    Some(t)
}

/// Whether image `generation` of process `tgid` is its current one (one
/// being released counts: its release is under way). A generation of 0
/// (charged while the usage map was full, or nothing charged: a multicast
/// handle) counts as current while the process has an entry.
#[inline(always)]
pub fn image_alive(tgid: u32, generation: u64) -> bool {
    match PROC_USAGE.get_ptr(tgid) {
        Some(p) => generation == 0 || held::image(generation_at(p)) == generation,
        None => false,
    }
}

/// Deletes process `tgid`'s usage entry if it was released: for a new
/// process given the pid (at its fork), which no thread of the released
/// one can outlive.
#[inline(always)]
pub fn forget_released(tgid: u32) {
    if PROC_USAGE.get_ptr(tgid).is_some_and(|p| generation_at(p) & held::RELEASED != 0) {
        let _ = PROC_USAGE.remove(tgid);
    }
}

/// Deletes cgroup `cgroup_id`'s total if it is 0: for a cgroup the agent
/// found removed (`forget_dead`), whose entry nothing else deletes (a
/// node's pods come and go, and the map would fill over weeks). Whether
/// it did. A charge can meet a removed cgroup only where its thread
/// moved out of it, and the cgroup was removed, during the driver's call:
/// that charge, made through the pointer it looked up before this
/// delete, is lost to the cgroup's total (gone with the cgroup; were a
/// second such charge to make the entry again, the first one's free would
/// take the new total below 0); after it, in the element the map gave a
/// new cgroup meanwhile, it would count there (a preempted program,
/// between its lookup and its add, at the very moment of that delete).
#[inline(always)]
pub fn forget_empty_cgroup(cgroup_id: u64) -> bool {
    // SAFETY: checked map value pointer.
    let empty = CGROUP_USAGE.get_ptr(cgroup_id).is_some_and(|p| unsafe { core::ptr::read_volatile(p) } == 0);
    empty && CGROUP_USAGE.remove(cgroup_id).is_ok()
}

/// Current totals, without changing them.
#[inline(always)]
pub fn current(tgid: u32, cgroup_id: u64) -> Totals {
    let proc_total = PROC_USAGE
        .get_ptr(tgid)
        // SAFETY: checked map value pointer.
        .map(|p| unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*p).bytes)) })
        .unwrap_or(0);
    let cgroup_total =
        // SAFETY: checked map value pointer.
        CGROUP_USAGE.get_ptr(cgroup_id).map(|p| unsafe { core::ptr::read_volatile(p) }).unwrap_or(0);
    Totals { proc_total, cgroup_total, slot: NO_SLOT, generation: 0 }
}
