//! Allocations. Every allocating shape enters through one program,
//! `alloc_entry`, which tells the shapes apart by the API id in its cookie
//! and works out what the call asks for (size, kind, where the result
//! goes), then applies the caller's limits once for all of them (one walk
//! of the limit check for the verifier, not one per shape); they share one
//! return program, which charges the call if the driver succeeded and
//! records the live allocation.
//!
//! Shapes read here:
//! - `Alloc`: `(T **out, size_t bytes, ...)`: `cuMemAlloc_v2`,
//!   `cuMemAllocManaged`, `cuMemAllocAsync[_ptsz]`,
//!   `cuMemAllocHost_v2`, `cuMemHostAlloc`;
//! - `Pitch`: `cuMemAllocPitch_v2`, charged pitch x rows as returned;
//! - `HostRegister`: `cuMemHostRegister_v2(void *p, size_t bytes, ..)`.
//!
//! `vmm.rs`, `array.rs` and `pool.rs` read `cuMemCreate`'s, the arrays'
//! and pool allocations' arguments.
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    api::{ids_of, in_mask, Shape},
    event_type, ns, stat, AllocCall, Change, LiveAlloc, LiveKey, CUDA_SUCCESS, FLAG_CGROUP_SLOTS_FULL,
    FLAG_REPLACED_STALE, NO_SLOT,
};

use crate::{
    account::{
        limit_usage,
        live::{self, Put},
        pending, usage,
    },
    base::{
        cookie::cookie,
        counters::count,
        opaque,
        records::{emit, Subject},
        task::Task,
        task_stack::on_task_stack,
    },
    device::current_device,
    limits::admit,
};

/// The entry-time state every allocation shares: the caller's (`task`'s)
/// cgroup and device, and the kind from the cookie `c`.
#[inline(always)]
fn start(task: Task, c: u64) -> AllocCall {
    AllocCall {
        cgroup_id: task.cgroup_id_in_place(),
        device: current_device(task),
        kind: gpumem_common::cookie::kind(c),
        ..AllocCall::default()
    }
}

/// Applies the caller's limits to the call's `size` bytes (a denied call
/// returns `CUDA_ERROR_OUT_OF_MEMORY` without entering the driver), then
/// remembers the call with what they decided (refused, or the limits that
/// reserved it) for the return: in the thread's task storage unless a
/// limit reserved it (account/pending.rs). `c` is the probe's cookie (read
/// once: each read is a helper call), `task` the caller.
#[inline(always)]
fn admit_and_remember(ctx: &ProbeContext, task: Task, c: u64, mut call: AllocCall) -> u32 {
    let api = gpumem_common::cookie::api(c);
    let ret_delta = crate::deny::ret_delta(c);
    let a = admit(task, call.size, call.device, call.cgroup_id, api, ret_delta != 0);
    if a.deny && ret_delta != 0 {
        crate::deny::return_out_of_memory(ctx, ret_delta);
    }
    // Opaque: the decision ends in many states, each its own constants
    // here, and the verifier would walk the keeping once for each.
    call.refused = opaque(u64::from(a.refused)) as u32;
    call.limit_slots = opaque(a.slots);
    pending::put_reserving(task, api, call.into(), call.limit_slots != 0);
    0
}

on_task_stack!(uprobe alloc_entry = AllocEntry => alloc_entry_run);

/// The APIs of each shape `alloc_entry` serves besides `Alloc`.
const PITCH: u64 = ids_of(Shape::Pitch);
const HOST_REGISTER: u64 = ids_of(Shape::HostRegister);
const VMM_CREATE: u64 = ids_of(Shape::VmmCreate);
const POOL_ALLOC: u64 = ids_of(Shape::PoolAlloc);
const ARRAYS: u64 = ids_of(Shape::Array) | ids_of(Shape::Array3D) | ids_of(Shape::Mipmap);

#[inline(always)]
fn alloc_entry_run(ctx: ProbeContext) -> u32 {
    let c = cookie(&ctx);
    let task = Task::current();
    let mut call = start(task, c);
    let api = gpumem_common::cookie::api(c);
    if in_mask(api, PITCH) {
        pitch_args(&ctx, &mut call);
    } else if in_mask(api, HOST_REGISTER) {
        // The caller's own memory, pinned: the address is the argument.
        call.addr = ctx.arg::<u64>(0).unwrap_or(0);
        call.size = ctx.arg::<u64>(1).unwrap_or(0);
    } else if in_mask(api, VMM_CREATE) {
        crate::families::vmm::create_args(&ctx, &mut call);
    } else if in_mask(api, POOL_ALLOC) {
        crate::families::pool::alloc_args(&ctx, task, &mut call);
    } else if in_mask(api, ARRAYS) {
        crate::families::array::array_args(&ctx, api, &mut call);
    } else {
        call.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
        call.size = ctx.arg::<u64>(1).unwrap_or(0);
    }
    admit_and_remember(&ctx, task, c, call)
}

/// `cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
/// size_t height, unsigned elementSize)`.
#[inline(always)]
fn pitch_args(ctx: &ProbeContext, call: &mut AllocCall) {
    call.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    call.pitch_ptr = ctx.arg::<u64>(1).unwrap_or(0);
    call.rows = ctx.arg::<u64>(3).unwrap_or(0);
    // The pitch is the driver's to choose, at least the width: admit on
    // width x rows; the return adjusts to what the driver charged.
    let width = ctx.arg::<u64>(2).unwrap_or(0);
    call.size = gpumem_common::array::mul(width, call.rows);
}

on_task_stack!(uretprobe alloc_return = AllocReturn => alloc_return_run);

#[inline(always)]
fn alloc_return_run(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let api = gpumem_common::cookie::api(c);
    let task = Task::current();
    let Some(p) = pending::take(task, api) else { return 0 };
    // SAFETY: every entry returning here keeps the allocation variant.
    let call = unsafe { p.call.alloc };
    let result = ctx.ret::<u64>() as u32;
    if call.refused == 1 && result == CUDA_SUCCESS {
        return 0; // refused at entry (and said so), yet it ran: nothing to charge
    }
    let pid_tgid = task.pid_tgid();
    let who = Subject::of(task, call.cgroup_id);
    let mut change =
        Change { size: call.size, result, kind: call.kind, device: call.device, ..Change::default() };
    if result != CUDA_SUCCESS {
        // A denied call comes back here too, with nothing reserved.
        limit_usage::release((pid_tgid >> 32) as u32, call.limit_slots, call.size);
        let t = usage::current((pid_tgid >> 32) as u32, call.cgroup_id);
        (change.proc_total, change.cgroup_total) = (t.proc_total, t.cgroup_total);
        emit(event_type::ALLOC_FAILED, api, who, change);
        return 0;
    }
    let addr = if call.out_ptr == 0 {
        call.addr
    } else {
        // SAFETY: reads user memory of the current process through the helper.
        match unsafe { bpf_probe_read_user(call.out_ptr as *const u64) } {
            Ok(a) => a,
            Err(_) => return unreadable(pid_tgid, &call),
        }
    };
    change.addr = addr;
    if call.pitch_ptr != 0 {
        // SAFETY: as above.
        let Ok(pitch) = (unsafe { bpf_probe_read_user(call.pitch_ptr as *const u64) }) else {
            return unreadable(pid_tgid, &call);
        };
        change.size = gpumem_common::array::mul(pitch, call.rows);
    }
    // Commit the reservation at the size the driver charged.
    limit_usage::adjust((pid_tgid >> 32) as u32, call.limit_slots, change.size.wrapping_sub(call.size));
    // The namespace is the API's (its free looks there), whatever the kind
    // charged: a host pool's pointers are freed by cuMemFreeAsync, a host
    // location's VMM handle by cuMemRelease.
    let namespace = ns::for_kind(gpumem_common::cookie::kind(c));
    record_alloc(api, who, change, namespace, call.limit_slots);
    0
}

/// The driver succeeded but its result cannot be read: the allocation is
/// not charged, and what the call (of thread `pid_tgid`) reserved goes
/// back.
#[inline(always)]
fn unreadable(pid_tgid: u64, call: &AllocCall) -> u32 {
    count(stat::OUT_PTR_UNREADABLE);
    limit_usage::release((pid_tgid >> 32) as u32, call.limit_slots, call.size);
    0
}

/// Charges a successful allocation, records it as live and sends its
/// `alloc` record (`change` carries address, size, kind and device).
#[inline(always)]
pub fn record_alloc(api: u32, who: Subject, mut change: Change, namespace: u32, limit_slots: u64) {
    let tgid = (who.pid_tgid >> 32) as u32;
    let key = LiveKey { tgid, ns: namespace, addr: change.addr };
    let mut t = usage::charge(tgid, who.cgroup_id, change.size, limit_slots);
    // Opaque: each cgroup slot is a different constant here, and the
    // verifier would walk the rest (a stale entry's uncharge) once for each.
    t.slot = opaque(u64::from(t.slot)) as u32;
    let live = LiveAlloc {
        size: change.size,
        cgroup_id: who.cgroup_id,
        kind: change.kind,
        device: change.device,
        cgroup_slot: t.slot,
        api,
        generation: t.generation,
        limit_slots,
        ..LiveAlloc::default()
    };
    let mut stale = LiveAlloc::default();
    if live::insert(key, &live, &mut stale) == Put::Replaced {
        drop_stale(key.tgid, &stale, who.cgroup_id, &mut t);
        change.flags |= FLAG_REPLACED_STALE;
    }
    change.generation = t.generation;
    change.proc_total = t.proc_total;
    change.cgroup_total = t.cgroup_total;
    if t.slot == NO_SLOT {
        change.flags |= FLAG_CGROUP_SLOTS_FULL;
    }
    emit(event_type::ALLOC, api, who, change);
}

/// `stale`, found at the address just allocated, is an allocation whose
/// free gpumem never saw: of this image (its charge is dropped so it is
/// not counted twice), or of an earlier image of this tgid that exited or
/// exec'd (uncharged already). `t`, the totals of the new charge, become
/// those after the drop where it changed them.
#[inline(always)]
fn drop_stale(tgid: u32, stale: &LiveAlloc, cgroup_id: u64, t: &mut usage::Totals) {
    if let Some(after) = usage::uncharge_current(tgid, stale) {
        t.proc_total = after.proc_total;
        if stale.cgroup_id == cgroup_id {
            t.cgroup_total = after.cgroup_total;
        }
    }
}
