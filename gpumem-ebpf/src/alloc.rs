//! Allocations. Every allocating family has its own entry program, which
//! works out what the call asks for (size, kind, where the result goes);
//! they share one return program, which charges the call if the driver
//! succeeded and records the live allocation.
//!
//! Entry shapes served here:
//! - `alloc_entry`: `(T **out, size_t bytes, ...)`: `cuMemAlloc_v2`,
//!   `cuMemAllocManaged`, `cuMemAllocAsync[_ptsz]`,
//!   `cuMemAllocFromPoolAsync[_ptsz]`, `cuMemAllocHost_v2`, `cuMemHostAlloc`;
//! - `pitch_entry`: `cuMemAllocPitch_v2`, charged pitch x rows as returned;
//! - `host_register_entry`: `cuMemHostRegister_v2(void *p, size_t bytes, ..)`.
//!
//! `vmm.rs` and `array.rs` add entries for `cuMemCreate` and the arrays.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    cookie_api, cookie_kind, event_type, ns, stat, EventRecord, LiveAlloc, LiveKey, Pending, CUDA_SUCCESS,
};

use crate::{
    account::{charge, cookie, count, current, emit, put_reserving_pending, take_pending, uncharge_current},
    context::current_device,
    exclusive::{exclusive, prog},
    limits::{adjust, admit, release},
    maps::LIVE,
};

/// The entry-time state every allocation shares: caller's cgroup and
/// device, and the kind from the cookie.
#[inline(always)]
pub fn pending_alloc<C: aya_ebpf::EbpfContext>(ctx: &C) -> Pending {
    Pending {
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        device: current_device(),
        kind: cookie_kind(cookie(ctx)),
        ..Pending::default()
    }
}

/// Applies the caller's limits to a request of `size` bytes and remembers
/// the call (refused or with its reservations) for the return; a denied
/// call returns `CUDA_ERROR_OUT_OF_MEMORY` without entering the driver.
#[inline(always)]
pub fn admit_and_remember(ctx: &ProbeContext, mut p: Pending, size: u64) -> u32 {
    let api = cookie_api(cookie(ctx));
    let ret_delta = crate::deny::ret_delta(ctx);
    let a = admit(size, p.device, api, ret_delta != 0);
    p.refused = a.refused as u32;
    p.reserved = size;
    p.live.limit_slots = a.slots;
    put_reserving_pending(api, &p);
    if a.deny && ret_delta != 0 {
        crate::deny::return_out_of_memory(ctx, ret_delta);
    }
    0
}

#[uprobe]
pub fn alloc_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::ALLOC_ENTRY, || alloc_entry_run(ctx))
}

#[inline(always)]
fn alloc_entry_run(ctx: ProbeContext) -> u32 {
    let mut p = pending_alloc(&ctx);
    p.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    p.arg = ctx.arg::<u64>(1).unwrap_or(0);
    admit_and_remember(&ctx, p, p.arg)
}

/// `cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
/// size_t height, unsigned elementSize)`.
#[uprobe]
pub fn pitch_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::PITCH_ENTRY, || pitch_entry_run(ctx))
}

#[inline(always)]
fn pitch_entry_run(ctx: ProbeContext) -> u32 {
    let mut p = pending_alloc(&ctx);
    p.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    p.pitch_ptr = ctx.arg::<u64>(1).unwrap_or(0);
    p.arg = ctx.arg::<u64>(3).unwrap_or(0);
    // The pitch is the driver's to choose, at least the width: admit on
    // width x rows; the return adjusts to what the driver charged.
    let width = ctx.arg::<u64>(2).unwrap_or(0);
    admit_and_remember(&ctx, p, gpumem_common::array::mul(width, p.arg))
}

/// `cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags)`: the
/// caller's own memory, pinned; the address is the argument.
#[uprobe]
pub fn host_register_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::HOST_REGISTER_ENTRY, || host_register_entry_run(ctx))
}

#[inline(always)]
fn host_register_entry_run(ctx: ProbeContext) -> u32 {
    let mut p = pending_alloc(&ctx);
    p.addr = ctx.arg::<u64>(0).unwrap_or(0);
    p.arg = ctx.arg::<u64>(1).unwrap_or(0);
    admit_and_remember(&ctx, p, p.arg)
}

#[uretprobe]
pub fn alloc_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::ALLOC_RETURN, || alloc_return_run(ctx))
}

#[inline(always)]
fn alloc_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie_api(cookie(&ctx));
    let Some(p) = take_pending(api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    if p.refused == 1 && result == CUDA_SUCCESS {
        return 0; // refused at entry (and said so), yet it ran: nothing to charge
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let mut rec = EventRecord {
        pid_tgid,
        cgroup_id: p.cgroup_id,
        size: p.arg,
        result,
        api,
        kind: p.kind,
        device: p.device,
        ..EventRecord::default()
    };
    if result != CUDA_SUCCESS {
        // A denied call comes back here too, with nothing reserved.
        release(p.live.limit_slots, p.reserved);
        let t = current(tgid, p.cgroup_id);
        rec.event = event_type::ALLOC_FAILED;
        rec.proc_total = t.proc_total;
        rec.cgroup_total = t.cgroup_total;
        emit(rec);
        return 0;
    }
    let addr = if p.out_ptr == 0 {
        p.addr
    } else {
        // SAFETY: reads user memory of the current process through the helper.
        match unsafe { bpf_probe_read_user(p.out_ptr as *const u64) } {
            Ok(a) => a,
            Err(_) => {
                count(stat::OUT_PTR_UNREADABLE);
                release(p.live.limit_slots, p.reserved);
                return 0;
            }
        }
    };
    if p.pitch_ptr != 0 {
        let Ok(pitch) = (unsafe { bpf_probe_read_user(p.pitch_ptr as *const u64) }) else {
            count(stat::OUT_PTR_UNREADABLE);
            release(p.live.limit_slots, p.reserved);
            return 0;
        };
        rec.size = gpumem_common::array::mul(pitch, p.arg);
    }
    // Commit the reservation at the size the driver charged.
    adjust(p.live.limit_slots, rec.size.wrapping_sub(p.reserved));
    record_alloc(&mut rec, tgid, ns::for_kind(p.kind), addr, p.live.limit_slots);
    0
}

/// Charges a successful allocation, records it as live and sends `rec`
/// (which carries size, cgroup, kind, device and api already).
#[inline(always)]
pub fn record_alloc(rec: &mut EventRecord, tgid: u32, namespace: u32, addr: u64, limit_slots: u64) {
    let key = LiveKey { tgid, ns: namespace, addr };
    // An entry at this key is an allocation whose free gpumem never saw:
    // of this image (drop its charge so it is not counted twice), or of an
    // earlier image of this tgid that exited or exec'd (already uncharged).
    // SAFETY: copied out before removal.
    if let Some(stale) = unsafe { LIVE.get(key) }.copied() {
        let _ = LIVE.remove(key);
        let _ = uncharge_current(tgid, &stale);
    }
    let t = charge(tgid, rec.cgroup_id, rec.size, limit_slots);
    let live = LiveAlloc {
        size: rec.size,
        cgroup_id: rec.cgroup_id,
        kind: rec.kind,
        device: rec.device,
        cgroup_slot: t.slot,
        api: rec.api,
        generation: t.generation,
        limit_slots,
        ..LiveAlloc::default()
    };
    if LIVE.insert(key, live, 0).is_err() {
        count(stat::MAP_FULL);
    }
    rec.event = event_type::ALLOC;
    rec.addr = addr;
    rec.generation = t.generation;
    rec.proc_total = t.proc_total;
    rec.cgroup_total = t.cgroup_total;
    if t.slot == gpumem_common::NO_SLOT {
        rec.flags |= gpumem_common::FLAG_CGROUP_SLOTS_FULL;
    }
    emit(*rec);
}
