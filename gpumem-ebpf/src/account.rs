//! In-kernel accounting shared by every API family: charging and
//! uncharging the process and cgroup totals, and sending records.
//!
//! Totals are updated with atomic fetch-and-add, so concurrent threads and
//! processes never lose an update, and each record carries the exact total
//! its own update produced.
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_comm, bpf_ktime_get_ns},
    maps::HashMap,
};
use gpumem_common::{stat, EventRecord, LiveAlloc, ProcUsage, NO_SLOT, PROC_CGROUP_SLOTS};

use crate::{
    held,
    maps::{CGROUP_USAGE, EVENTS, PROC_USAGE, STATS},
};

/// Adds `v` to `*p` atomically and returns the new value.
#[inline(always)]
pub fn add(p: *mut u64, v: u64) -> u64 {
    // SAFETY: `p` points into a map value the verifier has bounds-checked;
    // map values are 8-byte aligned.
    unsafe { crate::atomic::fetch_add(p, v) }.wrapping_add(v)
}

/// `i` masked to `n` entries (`n` a power of two), right where an array is
/// indexed. The value goes through the stack so LLVM cannot drop the mask
/// on the strength of an earlier bounds check: kernels before about 6.3
/// lose such a check when the index is spilled and reloaded ("unbounded
/// memory access").
#[inline(always)]
pub fn bounded(i: usize, n: usize) -> usize {
    // SAFETY: reads a local.
    unsafe { core::ptr::read_volatile(&i) & (n - 1) }
}

/// Subtracts `v` from `*p` atomically and returns the new value.
#[inline(always)]
pub fn sub(p: *mut u64, v: u64) -> u64 {
    add(p, v.wrapping_neg())
}

/// Counts one occurrence of `stat::*` on this CPU.
#[inline(always)]
pub fn count(which: u32) {
    if let Some(p) = STATS.get_ptr_mut(which) {
        // SAFETY: per-CPU slot, no other writer on this CPU while we run.
        unsafe { *p += 1 };
    }
}

/// The value at `key`, created as `init` when absent.
#[inline(always)]
fn get_or_insert<K, V>(map: &HashMap<K, V>, key: &K, init: &V) -> Option<*mut V> {
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
    let fresh = ProcUsage { generation: unsafe { bpf_ktime_get_ns() } | 1, ..ProcUsage::default() };
    let Some(proc) = get_or_insert(&PROC_USAGE, &tgid, &fresh) else {
        crate::limits::release(limit_slots, size);
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
            t.slot = slot;
            if !changed {
                if let Some(cg) = cg {
                    t.cgroup_total = sub(cg, size);
                }
            }
        }
        None => count(stat::CGROUP_SLOTS_FULL),
    }
    crate::limits::commit(proc, limit_slots, size);
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
        held::change(unsafe { core::ptr::addr_of_mut!((*proc).cgroup_bytes[slot]) }, size.wrapping_neg())
    };
    // The cgroup before the limits: a limit never admits a call while its
    // cgroup's total still counts what the limit gave back.
    if let Some(cg) = CGROUP_USAGE.get_ptr_mut(live.cgroup_id) {
        t.cgroup_total = if held { sub(cg, size) } else { unsafe { core::ptr::read_volatile(cg) } };
    }
    crate::limits::uncommit(proc, live.limit_slots, size);
    Some(t)
}

/// Current totals, without changing them.
#[inline(always)]
pub fn current(tgid: u32, cgroup_id: u64) -> Totals {
    let proc_total = PROC_USAGE
        .get_ptr(tgid)
        .map(|p| unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*p).bytes)) })
        .unwrap_or(0);
    let cgroup_total =
        CGROUP_USAGE.get_ptr(cgroup_id).map(|p| unsafe { core::ptr::read_volatile(p) }).unwrap_or(0);
    Totals { proc_total, cgroup_total, slot: NO_SLOT, generation: 0 }
}

/// Fills in the timestamp and comm, then sends `rec`; counts a drop when
/// the ring buffer is full.
///
/// Records are reserved after the change they report. Reserving first
/// would order the stream by the changes (a charge racing its killed
/// group's release can otherwise land behind the `exit` record), but a
/// reservation held across the accounting stalled the whole stream on a
/// 7.2 kernel under QEMU (every later record stuck behind one never seen
/// committed), so it is not done.
#[inline(always)]
pub fn emit(mut rec: EventRecord) {
    rec.ts_ns = unsafe { bpf_ktime_get_ns() };
    rec.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    // Waking the agent for every record costs the caller more than the
    // record itself: records are submitted quietly and the agent drains on
    // a short timer, unless a backlog builds up (then it is woken at once).
    let flags = if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= WAKEUP_BACKLOG {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    };
    match EVENTS.reserve::<EventRecord>(0) {
        Some(mut slot) => {
            slot.write(rec);
            slot.submit(flags);
        }
        None => count(stat::RINGBUF_DROPS),
    }
}

/// Bytes waiting in the ring buffer above which a record wakes the agent.
const WAKEUP_BACKLOG: u64 = 256 * 1024;

/// The attach cookie of the running probe: API id and memory kind.
#[inline(always)]
pub fn cookie<C: aya_ebpf::EbpfContext>(ctx: &C) -> u64 {
    // SAFETY: the context pointer is the one the kernel passed in.
    unsafe { aya_ebpf::helpers::generated::bpf_get_attach_cookie(ctx.as_ptr()) }
}

/// Takes the entry-time state of this thread's call to `api` (and
/// disarms it).
#[inline(always)]
pub fn take_pending(api: u32) -> Option<gpumem_common::Pending> {
    let slot = crate::maps::PENDING.get_ptr_mut(pending_key(api));
    // SAFETY: checked map value pointer; only this thread uses its key.
    let p = slot.map(|s| unsafe { core::ptr::read_volatile(s) }).filter(|p| p.armed == 1);
    match (slot, p) {
        (Some(slot), Some(p)) => {
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
pub fn put_pending(api: u32, p: &gpumem_common::Pending) {
    remember(api, p, false);
}

/// [`put_pending`] for a call that reserved bytes under limits (see
/// `alloc::admit_and_remember`, the only one): an entry still armed is a
/// call of the same API whose return the kernel skipped, and what it
/// reserved goes back first. Other APIs' entries never reserve, so their
/// programs leave that out.
#[inline(always)]
pub fn put_reserving_pending(api: u32, p: &gpumem_common::Pending) {
    remember(api, p, true);
}

#[inline(always)]
fn remember(api: u32, p: &gpumem_common::Pending, reserves: bool) {
    let key = pending_key(api);
    let armed = gpumem_common::Pending { armed: 1, ..*p };
    if let Some(slot) = crate::maps::PENDING.get_ptr_mut(key) {
        if reserves {
            crate::limits::abandon(slot);
        }
        // SAFETY: checked map value pointer; only this thread uses its key.
        unsafe { core::ptr::write_volatile(slot, armed) };
        return;
    }
    if crate::maps::PENDING.insert(key, armed, 0).is_err() {
        count(stat::MAP_FULL);
    }
    let _ = crate::maps::CALLERS.insert((key.pid_tgid >> 32) as u32, 1, 0);
}

#[inline(always)]
fn pending_key(api: u32) -> gpumem_common::PendingKey {
    gpumem_common::PendingKey { pid_tgid: aya_ebpf::helpers::bpf_get_current_pid_tgid(), api, _pad: 0 }
}
