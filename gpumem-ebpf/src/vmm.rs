//! The virtual memory management API (`cuMemCreate` and friends), as
//! PyTorch's expandable segments and NCCL use it.
//!
//! Physical memory is charged at `cuMemCreate` (to the device its
//! location names, or as host memory for host locations) and uncharged
//! when the driver frees it: at `cuMemRelease` if the handle is not mapped,
//! otherwise at the last `cuMemUnmap` of it. `cuMemMap`/`cuMemUnmap` only
//! count mappings; address reservations are not probed (no memory).
//!
//! Limitation: `cuMemUnmap` is matched by its start address, so one unmap
//! spanning several mappings counts as the first one only.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{cookie_api, kind, ns, stat, EventRecord, LiveKey, Pending, CUDA_SUCCESS};

use crate::{
    account::{cookie, count, put_pending, take_pending},
    alloc::pending_alloc,
    atomic::fetch_add,
    exclusive::{exclusive, prog},
    free::{live_key, record_free, record_untracked_free},
    maps::{LIVE, VMM_MAPPINGS},
};

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;

/// `CUmemAllocationProp` up to its location: type, requested handle
/// types, location type, location id.
#[repr(C)]
#[derive(Clone, Copy)]
struct PropHead {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: i32,
}

/// `cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
/// const CUmemAllocationProp *prop, unsigned long long flags)`; returns
/// through `alloc_return`.
#[uprobe]
pub fn vmm_create_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::VMM_CREATE_ENTRY, || vmm_create_entry_run(ctx))
}

#[inline(always)]
fn vmm_create_entry_run(ctx: ProbeContext) -> u32 {
    let mut p = pending_alloc(&ctx);
    p.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    p.arg = ctx.arg::<u64>(1).unwrap_or(0);
    let prop = ctx.arg::<u64>(2).unwrap_or(0);
    // SAFETY: reads the caller's struct through the helper.
    match unsafe { bpf_probe_read_user(prop as *const PropHead) } {
        Ok(head) if head.location_type == LOCATION_DEVICE => p.device = head.location_id as u32,
        Ok(_) => p.kind = kind::HOST,
        Err(_) => count(stat::OUT_PTR_UNREADABLE),
    }
    crate::alloc::admit_and_remember(&ctx, p, p.arg)
}

/// `cuMemRelease(handle)`: the entry takes the handle out of the live map.
#[uprobe]
pub fn vmm_release_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::VMM_RELEASE_ENTRY, || vmm_release_entry_run(ctx))
}

#[inline(always)]
fn vmm_release_entry_run(ctx: ProbeContext) -> u32 {
    let handle = ctx.arg::<u64>(0).unwrap_or(0);
    let key = live_key(ns::VMM_HANDLE, handle);
    let mut p = Pending { arg: handle, ..Pending::default() };
    // SAFETY: copied out before removal.
    if let Some(live) = unsafe { LIVE.get(key) }.copied() {
        let _ = LIVE.remove(key);
        p.found = 1;
        p.live = live;
    }
    put_pending(cookie_api(cookie(&ctx)), &p);
    0
}

#[uretprobe]
pub fn vmm_release_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::VMM_RELEASE_RETURN, || vmm_release_return_run(ctx))
}

#[inline(always)]
fn vmm_release_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie_api(cookie(&ctx));
    let Some(mut p) = take_pending(api) else {
        return 0;
    };
    let result = ctx.ret::<u64>() as u32;
    let key = live_key(ns::VMM_HANDLE, p.arg);
    if result != CUDA_SUCCESS || (p.found == 1 && p.live.maps != 0) {
        // Kept by the driver (failed), or still mapped: stays charged,
        // marked released so that the last unmap uncharges it.
        if p.found == 1 {
            p.live.released = (result == CUDA_SUCCESS) as u32;
            if LIVE.insert(key, p.live, 0).is_err() {
                count(stat::MAP_FULL);
            }
        }
        return 0;
    }
    let mut rec = EventRecord {
        pid_tgid: bpf_get_current_pid_tgid(),
        addr: p.arg,
        result,
        api,
        kind: kind::VMM,
        ..EventRecord::default()
    };
    if !(p.found == 1 && record_free(&mut rec, key.tgid, &p.live)) {
        record_untracked_free(&mut rec, key.tgid, p.cgroup_id);
    }
    0
}

/// `cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, handle, flags)`.
#[uprobe]
pub fn vmm_map_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::VMM_MAP_ENTRY, || vmm_map_entry_run(ctx))
}

#[inline(always)]
fn vmm_map_entry_run(ctx: ProbeContext) -> u32 {
    let p = Pending {
        addr: ctx.arg::<u64>(0).unwrap_or(0),
        arg: ctx.arg::<u64>(3).unwrap_or(0),
        ..Pending::default()
    };
    put_pending(cookie_api(cookie(&ctx)), &p);
    0
}

#[uretprobe]
pub fn vmm_map_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::VMM_MAP_RETURN, || vmm_map_return_run(ctx))
}

#[inline(always)]
fn vmm_map_return_run(ctx: RetProbeContext) -> u32 {
    let Some(p) = take_pending(cookie_api(cookie(&ctx))) else {
        return 0;
    };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // Handles gpumem never saw created (imported, or older than the agent)
    // are not charged here, so their mappings need no counting.
    if let Some(live) = LIVE.get_ptr_mut(LiveKey { tgid, ns: ns::VMM_HANDLE, addr: p.arg }) {
        // SAFETY: checked map value pointer.
        unsafe { fetch_add(core::ptr::addr_of_mut!((*live).maps), 1) };
        let map_key = LiveKey { tgid, ns: ns::VMM_MAPPING, addr: p.addr };
        if VMM_MAPPINGS.insert(map_key, p.arg, 0).is_err() {
            count(stat::MAP_FULL);
        }
    }
    0
}

/// `cuMemUnmap(CUdeviceptr ptr, size_t size)`.
#[uprobe]
pub fn vmm_unmap_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::VMM_UNMAP_ENTRY, || vmm_unmap_entry_run(ctx))
}

#[inline(always)]
fn vmm_unmap_entry_run(ctx: ProbeContext) -> u32 {
    let p = Pending { addr: ctx.arg::<u64>(0).unwrap_or(0), ..Pending::default() };
    put_pending(cookie_api(cookie(&ctx)), &p);
    0
}

#[uretprobe]
pub fn vmm_unmap_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::VMM_UNMAP_RETURN, || vmm_unmap_return_run(ctx))
}

#[inline(always)]
fn vmm_unmap_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie_api(cookie(&ctx));
    let Some(p) = take_pending(api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    if result != CUDA_SUCCESS {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let map_key = LiveKey { tgid, ns: ns::VMM_MAPPING, addr: p.addr };
    // SAFETY: copied out before removal.
    let Some(handle) = (unsafe { VMM_MAPPINGS.get(map_key) }).copied() else {
        return 0;
    };
    let _ = VMM_MAPPINGS.remove(map_key);
    let key = LiveKey { tgid, ns: ns::VMM_HANDLE, addr: handle };
    let Some(live) = LIVE.get_ptr_mut(key) else {
        return 0;
    };
    // SAFETY: checked map value pointer.
    let before = unsafe { fetch_add(core::ptr::addr_of_mut!((*live).maps), u64::MAX) };
    let released = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*live).released)) };
    if before == 1 && released == 1 {
        // SAFETY: copied out before removal.
        let Some(gone) = (unsafe { LIVE.get(key) }).copied() else {
            return 0;
        };
        let _ = LIVE.remove(key);
        let mut rec = EventRecord { pid_tgid, addr: handle, result, api, ..EventRecord::default() };
        record_free(&mut rec, tgid, &gone);
    }
    0
}
