//! The virtual memory management API (`cuMemCreate` and friends), as
//! PyTorch's expandable segments and NCCL use it.
//!
//! Physical memory is charged at `cuMemCreate` (to the device its
//! location names, or as host memory for host locations) and uncharged
//! when the driver frees it: at `cuMemRelease` if the handle is not mapped,
//! otherwise at the last `cuMemUnmap` of it. `cuMemMap`/`cuMemUnmap` only
//! count mappings; address reservations are not probed (no memory).
//!
//! `cuMemRetainAllocationHandle` adds a reference to a handle (NCCL and
//! cuda.core free through one): each needs its own `cuMemRelease`, and the
//! memory goes at the last release after the last unmap.
//!
//! Limitations: `cuMemUnmap` is matched by its start address, so one unmap
//! spanning several mappings counts as the first one only; a retain that
//! returns while another thread's release of the same handle is between
//! its entry and return is not counted.
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    id, kind, ns,
    pool::{location, PropsHead},
    stat, AllocCall, Change, LiveAlloc, LiveKey, MappingCall, CUDA_SUCCESS,
};

use crate::{
    account::{live, pending, usage},
    base::task::Task,
    base::{
        atomic::{add_nofetch_u32, fetch_add},
        cookie,
        counters::count,
        task_stack::on_task_stack,
    },
    families::{
        free::{caller_cgroup, live_key_of, record_free, record_untracked_free, take_live},
        report::report,
    },
    maps::VMM_MAPPINGS,
};

/// `cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
/// const CUmemAllocationProp *prop, unsigned long long flags)`, read for
/// `alloc_entry`; returns through `alloc_return`.
#[inline(always)]
pub fn create_args(ctx: &ProbeContext, call: &mut AllocCall) {
    call.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    call.size = ctx.arg::<u64>(1).unwrap_or(0);
    let prop = ctx.arg::<u64>(2).unwrap_or(0);
    // SAFETY: reads the caller's struct through the helper.
    match unsafe { bpf_probe_read_user(prop as *const PropsHead) } {
        Ok(head) if head.location.kind == location::DEVICE => call.device = head.location.id as u32,
        Ok(_) => call.kind = kind::HOST,
        Err(_) => count(stat::OUT_PTR_UNREADABLE),
    }
}

on_task_stack!(
    /// `cuMemRelease(handle)`: the entry takes the handle out of the live map.
    uprobe vmm_release_entry = VmmReleaseEntry => vmm_release_entry_run
);

#[inline(always)]
fn vmm_release_entry_run(ctx: ProbeContext) -> u32 {
    let task = Task::current();
    let call = take_live(task, ns::VMM_HANDLE, ctx.arg::<u64>(0).unwrap_or(0));
    pending::put(task, cookie::api(&ctx), call.into());
    0
}

on_task_stack!(uretprobe vmm_release_return = VmmReleaseReturn => vmm_release_return_run);

#[inline(always)]
fn vmm_release_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let task = Task::current();
    let Some(p) = pending::take(task, api) else {
        return 0;
    };
    // SAFETY: the release entry keeps the free variant.
    let mut call = unsafe { p.call.free };
    let result = ctx.ret::<u64>() as u32;
    let pid_tgid = task.pid_tgid();
    let key = live_key_of(pid_tgid, ns::VMM_HANDLE, call.addr);
    if result == CUDA_SUCCESS && call.found == 1 && call.live.retained != 0 {
        // A retained reference given back: the memory has others.
        call.live.retained -= 1;
        live::keep(key, &call.live);
        return 0;
    }
    if result != CUDA_SUCCESS || (call.found == 1 && call.live.maps != 0) {
        // Kept by the driver (failed), or still mapped: stays charged,
        // marked released so that the last unmap uncharges it.
        if call.found == 1 {
            call.live.released = (result == CUDA_SUCCESS) as u32;
            live::keep(key, &call.live);
        }
        return 0;
    }
    let change = Change { addr: call.addr, result, kind: kind::VMM, ..Change::default() };
    if !(call.found == 1 && gone(task, api, change, &call.live)) {
        record_untracked_free(task, api, caller_cgroup(task, &call), change);
    }
    0
}

/// The handle's memory is gone (`change` carries handle and result): its
/// free by `task`, or for a multicast handle (nothing charged) a reported
/// call.
#[inline(always)]
fn gone(task: Task, api: u32, change: Change, live: &LiveAlloc) -> bool {
    if live.api == id::MULTICAST_CREATE {
        report(task, api, kind::VMM, change.addr, 0, live.device);
        return true;
    }
    record_free(task, api, change, live)
}

on_task_stack!(
    /// `cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, handle, flags)`.
    uprobe vmm_map_entry = VmmMapEntry => vmm_map_entry_run
);

#[inline(always)]
fn vmm_map_entry_run(ctx: ProbeContext) -> u32 {
    let call = MappingCall { va: ctx.arg::<u64>(0).unwrap_or(0), handle: ctx.arg::<u64>(3).unwrap_or(0) };
    pending::put(Task::current(), cookie::api(&ctx), call.into());
    0
}

on_task_stack!(uretprobe vmm_map_return = VmmMapReturn => vmm_map_return_run);

#[inline(always)]
fn vmm_map_return_run(ctx: RetProbeContext) -> u32 {
    let task = Task::current();
    let Some(p) = pending::take(task, cookie::api(&ctx)) else {
        return 0;
    };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the map entry keeps the mapping variant.
    let call = unsafe { p.call.mapping };
    let tgid = task.tgid();
    // Handles gpumem never saw created (imported, or older than the agent)
    // are not charged here, so their mappings need no counting.
    if let Some(live) = live::handle(LiveKey { tgid, ns: ns::VMM_HANDLE, addr: call.handle }) {
        // SAFETY: checked map value pointer.
        unsafe { fetch_add(core::ptr::addr_of_mut!((*live).maps), 1) };
        let map_key = LiveKey { tgid, ns: ns::VMM_MAPPING, addr: call.va };
        if VMM_MAPPINGS.insert(map_key, call.handle, 0).is_err() {
            count(stat::MAP_FULL);
        }
    }
    0
}

on_task_stack!(
    /// `cuMemUnmap(CUdeviceptr ptr, size_t size)`.
    uprobe vmm_unmap_entry = VmmUnmapEntry => vmm_unmap_entry_run
);

#[inline(always)]
fn vmm_unmap_entry_run(ctx: ProbeContext) -> u32 {
    let call = MappingCall { va: ctx.arg::<u64>(0).unwrap_or(0), handle: 0 };
    pending::put(Task::current(), cookie::api(&ctx), call.into());
    0
}

on_task_stack!(uretprobe vmm_unmap_return = VmmUnmapReturn => vmm_unmap_return_run);

#[inline(always)]
fn vmm_unmap_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let task = Task::current();
    let Some(p) = pending::take(task, api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    if result != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the unmap entry keeps the mapping variant.
    let va = unsafe { p.call.mapping.va };
    let tgid = task.tgid();
    let map_key = LiveKey { tgid, ns: ns::VMM_MAPPING, addr: va };
    // SAFETY: copied out before removal.
    let Some(handle) = (unsafe { VMM_MAPPINGS.get(map_key) }).copied() else {
        return 0;
    };
    let _ = VMM_MAPPINGS.remove(map_key);
    let key = LiveKey { tgid, ns: ns::VMM_HANDLE, addr: handle };
    let Some(live) = live::handle(key) else {
        return 0;
    };
    // SAFETY: checked map value pointer.
    let before = unsafe { fetch_add(core::ptr::addr_of_mut!((*live).maps), u64::MAX) };
    // SAFETY: as above.
    let released = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*live).released)) };
    if before == 1 && released == 1 {
        let mut last = LiveAlloc::default();
        if !live::take(key, &mut last) {
            return 0; // another thread's unmap or release took it
        }
        let change = Change { addr: handle, result, ..Change::default() };
        gone(task, api, change, &last);
    }
    0
}

/// Forgets the mapping at `key` in `VMM_MAPPINGS` if its process image has
/// exited or exec'd without unmapping it: the handle mapped there is of an
/// image that is not its process's current one, or (where the handle's
/// entry is gone, or never had an image) the process has no usage entry
/// at all (the agent found it gone: see families/exit.rs `forget_dead`).
/// Whether it did. The mapping is read again just before its removal, and
/// left if it changed (mapped again by the current image); a change in
/// the few instructions between that read and the removal is not seen.
#[inline(always)]
pub fn forget_dead_mapping(key: LiveKey) -> bool {
    let Some(handle) = mapped(key) else { return false };
    let owner = LiveKey { tgid: key.tgid, ns: ns::VMM_HANDLE, addr: handle };
    // SAFETY: a checked map value pointer, read once.
    let image = live::handle(owner).map_or(0, |h| unsafe { (*h).generation });
    !usage::image_alive(key.tgid, image) && mapped(key) == Some(handle) && VMM_MAPPINGS.remove(key).is_ok()
}

/// The handle mapped at `key`, if any.
#[inline(always)]
fn mapped(key: LiveKey) -> Option<u64> {
    // SAFETY: copied out.
    unsafe { VMM_MAPPINGS.get(key) }.copied()
}

on_task_stack!(
    /// `cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
    /// void *addr)` returns here from `call_out_entry`: the handle (the
    /// one mapped at `addr`, its value unchanged) has one more reference.
    uretprobe vmm_retain_return = VmmRetainReturn => vmm_retain_return_run
);

#[inline(always)]
fn vmm_retain_return_run(ctx: RetProbeContext) -> u32 {
    let task = Task::current();
    let Some(p) = pending::take(task, cookie::api(&ctx)) else { return 0 };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the call-out entry keeps the report variant.
    let out = unsafe { p.call.report.out_ptr };
    // SAFETY: reads the caller's out-parameter through the helper.
    let Ok(handle) = (unsafe { bpf_probe_read_user(out as *const u64) }) else {
        count(stat::OUT_PTR_UNREADABLE);
        return 0;
    };
    let tgid = task.tgid();
    // Handles gpumem never saw created are not charged here.
    if let Some(live) = live::handle(LiveKey { tgid, ns: ns::VMM_HANDLE, addr: handle }) {
        // SAFETY: checked map value pointer.
        unsafe { add_nofetch_u32(core::ptr::addr_of_mut!((*live).retained), 1) };
    }
    0
}
