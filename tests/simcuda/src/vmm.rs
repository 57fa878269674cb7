//! The virtual memory management API: physical handles, address
//! reservations, mappings. A handle's memory goes at its last release
//! (`cuMemCreate` and each `cuMemRetainAllocationHandle` hold one
//! reference) after its last unmap, as in the driver.
use std::{
    collections::HashMap,
    ffi::{c_ulonglong, c_void},
    sync::{Mutex, MutexGuard, OnceLock},
};

use crate::{
    cuda::{
        CUdeviceptr, CUresult, PropsHead, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
        LOCATION_DEVICE,
    },
    state,
};

struct Handle {
    /// Device the memory is on (None: host).
    device: Option<i32>,
    bytes: u64,
    maps: u32,
    /// References: 1 from `cuMemCreate`, one more per retain.
    refs: u32,
}

#[derive(Default)]
struct Vmm {
    handles: HashMap<u64, Handle>,
    mappings: HashMap<u64, u64>,
    next_va: u64,
}

fn vmm() -> MutexGuard<'static, Vmm> {
    static V: OnceLock<Mutex<Vmm>> = OnceLock::new();
    V.get_or_init(|| Mutex::new(Vmm { next_va: crate::backing::VMM_BASE, ..Vmm::default() }))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Frees a handle's memory once it is released and unmapped.
fn settle(v: &mut Vmm, handle: u64) {
    let done = v.handles.get(&handle).is_some_and(|h| h.refs == 0 && h.maps == 0);
    if done {
        let h = v.handles.remove(&handle).unwrap();
        if let (Some(dev), Ok(mut card)) = (h.device, state::card()) {
            card.unreserve(dev, h.bytes);
        }
    }
}

pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const PropsHead,
    _flags: c_ulonglong,
) -> CUresult {
    if handle.is_null() || prop.is_null() || size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's property struct, checked non-null above.
    let prop = unsafe { &*prop };
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let device = (prop.location.kind == LOCATION_DEVICE).then_some(prop.location.id);
    if let Some(dev) = device {
        if !card.reserve(dev, size as u64) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    let h = card.handle();
    drop(card);
    vmm().handles.insert(h, Handle { device, bytes: size as u64, maps: 0, refs: 1 });
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *handle = h };
    CUDA_SUCCESS
}

/// A handle with no memory of its own (a multicast object), mapped and
/// released like any other.
pub(crate) fn empty_handle() -> Result<u64, CUresult> {
    let h = state::card()?.handle();
    vmm().handles.insert(h, Handle { device: None, bytes: 0, maps: 0, refs: 1 });
    Ok(h)
}

/// Whether `handle` is a live handle.
pub(crate) fn is_handle(handle: u64) -> bool {
    vmm().handles.contains_key(&handle)
}

pub extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    let mut v = vmm();
    match v.handles.get_mut(&handle) {
        Some(h) if h.refs > 0 => h.refs -= 1,
        _ => return CUDA_ERROR_INVALID_VALUE,
    }
    settle(&mut v, handle);
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    _flags: c_ulonglong,
) -> CUresult {
    if ptr.is_null() || size == 0 || !(alignment == 0 || alignment.is_power_of_two()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut v = vmm();
    let va = v.next_va.next_multiple_of((alignment as u64).max(1 << 21));
    let next = va + (size as u64).div_ceil(1 << 21) * (1 << 21);
    if next > crate::backing::VMM_BASE + crate::backing::WINDOW {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v.next_va = next;
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *ptr = va };
    CUDA_SUCCESS
}

pub extern "C" fn cuMemAddressFree(_ptr: CUdeviceptr, _size: usize) -> CUresult {
    CUDA_SUCCESS
}

pub extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    _size: usize,
    _offset: usize,
    handle: u64,
    _flags: c_ulonglong,
) -> CUresult {
    let mut v = vmm();
    if v.mappings.contains_key(&ptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match v.handles.get_mut(&handle) {
        Some(h) if h.refs > 0 => h.maps += 1,
        _ => return CUDA_ERROR_INVALID_VALUE,
    }
    v.mappings.insert(ptr, handle);
    CUDA_SUCCESS
}

pub extern "C" fn cuMemUnmap(ptr: CUdeviceptr, _size: usize) -> CUresult {
    let mut v = vmm();
    let Some(handle) = v.mappings.remove(&ptr) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if let Some(h) = v.handles.get_mut(&handle) {
        h.maps -= 1;
    }
    settle(&mut v, handle);
    CUDA_SUCCESS
}

/// `cuMemRetainAllocationHandle(*handle, addr)`: the handle mapped at
/// `addr` (a mapping's start), with one more reference.
pub unsafe extern "C" fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) -> CUresult {
    let mut v = vmm();
    let Some(&h) = v.mappings.get(&(addr as u64)) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if handle.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Some(held) = v.handles.get_mut(&h) {
        held.refs += 1;
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { *handle = h };
    CUDA_SUCCESS
}

/// Exports are opaque numbers naming the handle.
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut u64,
    handle: u64,
    _handle_type: u32,
    _flags: c_ulonglong,
) -> CUresult {
    if shareable.is_null() || !vmm().handles.contains_key(&handle) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *shareable = handle };
    CUDA_SUCCESS
}

/// Importing gives a new handle to the same memory, charged to nobody new.
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut u64,
    os_handle: *mut std::ffi::c_void,
    _handle_type: u32,
) -> CUresult {
    if handle.is_null() || os_handle.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let h = match state::card() {
        Ok(mut c) => c.handle(),
        Err(e) => return e,
    };
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *handle = h };
    CUDA_SUCCESS
}

/// The granularity every VMM size and address is a multiple of, on the
/// real driver 2 MiB for device memory (minimum and recommended alike).
pub const GRANULARITY: usize = 2 << 20;

pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const PropsHead,
    _option: u32,
) -> CUresult {
    if granularity.is_null() || prop.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { *granularity = GRANULARITY };
    CUDA_SUCCESS
}

/// Access is not modelled; the range must start at a mapping.
pub extern "C" fn cuMemSetAccess(ptr: CUdeviceptr, _size: usize, desc: *const u8, count: usize) -> CUresult {
    if desc.is_null() || count == 0 || !vmm().mappings.contains_key(&ptr) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}
