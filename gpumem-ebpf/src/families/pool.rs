//! Memory pools. A stream-ordered allocation from a pool is charged to
//! the pool's location (device memory of the pool's device, pinned host
//! memory of a host pool, managed memory of a managed pool), so the entry
//! of `cuMemAllocFromPoolAsync` looks its pool up in the process's pools,
//! which the calls that hand out pools fill:
//! - `pool_create_entry`: `cuMemPoolCreate(*pool, *props)`, from the props;
//! - `pool_of_location_entry`: `cuMemGetMemPool`/`cuMemGetDefaultMemPool(
//!   *pool, *location, type)` (CUDA 13), from the location and type;
//! - `pool_of_device_entry`: `cuDeviceGetMemPool`/`cuDeviceGetDefaultMemPool(
//!   *pool, dev)`, the device's own pool;
//! - `pool_learn_return`: at their successful return, the pool handle and
//!   its place go into `PROC_POOLS` (report.rs forgets one at
//!   `cuMemPoolDestroy`, exit.rs all of a process's at its exit or exec).
//!
//! `cuMemAllocAsync` allocates from its stream's device's current pool,
//! which must be a pool of that device (`cuDeviceSetMemPool`): device
//! memory of the caller's device, as `alloc_entry` charges it.
//!
//! A pool handed to another thread between the driver's write of the
//! handle and this return's learning it would be charged as device memory
//! once; a process with more than `POOL_SLOTS` live pools has the others'
//! allocations charged so too (and a full map counted).
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    pool::{Location, Place, ProcPools, PropsHead},
    stat, AllocCall, PoolCall, CUDA_SUCCESS,
};

use crate::{
    account::{pending, usage},
    base::task::Task,
    base::{atomic::compare_exchange, bounded, cookie, counters::count, task_stack::on_task_stack},
    device::current_device,
    maps::PROC_POOLS,
};

/// `cuMemAllocFromPoolAsync[_ptsz](CUdeviceptr *out, size_t bytes,
/// CUmemoryPool pool, CUstream)`, read for `alloc_entry`; returns through
/// `alloc_return`.
#[inline(always)]
pub fn alloc_args(ctx: &ProbeContext, task: Task, call: &mut AllocCall) {
    call.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    call.size = ctx.arg::<u64>(1).unwrap_or(0);
    let pool = ctx.arg::<u64>(2).unwrap_or(0);
    let tgid = task.tgid();
    // SAFETY: a map value read in place, copied out field by field.
    if let Some(place) = unsafe { PROC_POOLS.get(tgid) }.and_then(|p| p.place(pool)) {
        (call.kind, call.device) = (place.kind, place.device);
    }
}

on_task_stack!(
    /// `cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)`.
    uprobe pool_create_entry = PoolCreateEntry => pool_create_entry_run
);

#[inline(always)]
fn pool_create_entry_run(ctx: ProbeContext) -> u32 {
    let props = ctx.arg::<u64>(1).unwrap_or(0);
    // SAFETY: reads the caller's struct through the helper.
    let head = unsafe { bpf_probe_read_user(props as *const PropsHead) }.unwrap_or_default();
    let task = Task::current();
    remember(&ctx, task, Place::of(head.alloc_type, head.location, current_device(task)))
}

on_task_stack!(
    /// `cuMemGetMemPool`/`cuMemGetDefaultMemPool(CUmemoryPool *pool,
    /// CUmemLocation *location, CUmemAllocationType type)`.
    uprobe pool_of_location_entry = PoolOfLocationEntry => pool_of_location_entry_run
);

#[inline(always)]
fn pool_of_location_entry_run(ctx: ProbeContext) -> u32 {
    let location = ctx.arg::<u64>(1).unwrap_or(0);
    let alloc_type = ctx.arg::<u64>(2).unwrap_or(0) as u32;
    // SAFETY: reads the caller's struct through the helper.
    let at = unsafe { bpf_probe_read_user(location as *const Location) }.unwrap_or_default();
    let task = Task::current();
    remember(&ctx, task, Place::of(alloc_type, at, current_device(task)))
}

on_task_stack!(
    /// `cuDeviceGetMemPool`/`cuDeviceGetDefaultMemPool(CUmemoryPool *pool,
    /// CUdevice dev)`.
    uprobe pool_of_device_entry = PoolOfDeviceEntry => pool_of_device_entry_run
);

#[inline(always)]
fn pool_of_device_entry_run(ctx: ProbeContext) -> u32 {
    let dev = ctx.arg::<u64>(1).unwrap_or(0) as u32;
    remember(&ctx, Task::current(), Place { kind: gpumem_common::kind::DEVICE, device: dev })
}

/// Keeps the pool's place and where the driver writes the pool for the
/// return of `task`'s call.
#[inline(always)]
fn remember(ctx: &ProbeContext, task: Task, place: Place) -> u32 {
    let call = PoolCall { out_ptr: ctx.arg::<u64>(0).unwrap_or(0), place };
    pending::put(task, cookie::api(ctx), call.into());
    0
}

on_task_stack!(uretprobe pool_learn_return = PoolLearnReturn => pool_learn_return_run);

#[inline(always)]
fn pool_learn_return_run(ctx: RetProbeContext) -> u32 {
    let task = Task::current();
    let Some(p) = pending::take(task, cookie::api(&ctx)) else { return 0 };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the pool entries keep the pool variant.
    let call = unsafe { p.call.pool };
    // SAFETY: reads the caller's out-parameter through the helper.
    let Ok(pool) = (unsafe { bpf_probe_read_user(call.out_ptr as *const u64) }) else {
        count(stat::OUT_PTR_UNREADABLE);
        return 0;
    };
    if pool != 0 {
        learn(task.tgid(), pool, call.place);
    }
    0
}

/// Puts `pool` at `place` in the process's pools: its own slot, or a free
/// one claimed against another thread learning a pool at the same time.
#[inline(always)]
fn learn(tgid: u32, pool: u64, place: Place) {
    let Some(pools) = usage::get_or_insert(&PROC_POOLS, &tgid, &ProcPools::default()) else { return };
    let mut tries = 0;
    while tries < 2 {
        // SAFETY: a checked map value pointer.
        let Some(i) = (unsafe { &*pools }).slot_for(pool) else { break };
        let i = bounded(i, gpumem_common::pool::POOL_SLOTS);
        // SAFETY: as above; the slot is ours once it holds `pool`.
        let handle = unsafe { core::ptr::addr_of_mut!((*pools).handles[i]) };
        // SAFETY: as above.
        let found = unsafe { compare_exchange(handle, 0, pool) };
        if found == 0 || found == pool {
            // SAFETY: as above.
            unsafe { (*pools).places[i] = place };
            return;
        }
        tries += 1;
    }
    count(stat::MAP_FULL);
}

/// Where `pool` is, if the process's pool is known (its `call` records
/// name that kind and device).
#[inline(always)]
pub fn place(tgid: u32, pool: u64) -> Option<gpumem_common::pool::Place> {
    // SAFETY: values are copied out.
    unsafe { PROC_POOLS.get(tgid) }.and_then(|p| p.place(pool))
}

/// Forgets `pool` (`cuMemPoolDestroy` succeeded).
#[inline(always)]
pub fn forget(tgid: u32, pool: u64) {
    let Some(pools) = PROC_POOLS.get_ptr_mut(tgid) else { return };
    // SAFETY: a checked map value pointer.
    if let Some(i) = (unsafe { &*pools }).find(pool) {
        let i = bounded(i, gpumem_common::pool::POOL_SLOTS);
        // SAFETY: as above.
        unsafe { (*pools).handles[i] = 0 };
    }
}
