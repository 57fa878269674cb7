//! Device memory: cuMemAlloc / cuMemFree / cuMemGetInfo.
use crate::{
    context::current_device,
    cuda::{CUdeviceptr, CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS},
    state,
};

/// `alloc_device`'s `how` for managed memory.
pub(crate) const MANAGED: u32 = 1;

/// Allocates `bytes` on the current context's device into `*dptr`. `how`
/// keeps the exported bodies distinct (see the crate docs), and says
/// whether the memory is managed.
pub(crate) unsafe fn alloc_device(dptr: *mut CUdeviceptr, bytes: usize, how: u32) -> CUresult {
    let _ = std::hint::black_box(how);
    if dptr.is_null() || bytes == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (dev, mut card) = match crate::context::current_card() {
        Ok(x) => x,
        Err(e) => return e,
    };
    match card.allocate(dev, bytes as u64, how == MANAGED, None) {
        Some(addr) => {
            // SAFETY: the caller's out-pointer, valid by the driver API's contract.
            unsafe { *dptr = addr };
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

pub(crate) fn free_device(dptr: CUdeviceptr, how: u32) -> CUresult {
    let _ = std::hint::black_box(how);
    if dptr == 0 {
        return CUDA_SUCCESS; // freeing NULL is a no-op, as in the driver
    }
    // The card's guard goes before pools are asked: they are locked before
    // the card elsewhere. Only a pool's allocation asks them (a plain
    // cuMemFree, the bench's, does not).
    let released = match state::card() {
        Ok(mut card) => card.release(dptr),
        Err(e) => return e,
    };
    let freed = match released {
        Some(live) => {
            if live.pool.is_some() {
                crate::pool::forget(dptr);
                if let Ok(mut card) = state::card() {
                    card.reuse_pool_block(dptr, &live);
                }
            }
            true
        }
        // Not device memory: a host pool's allocation, or nothing.
        None => {
            crate::pool::forget(dptr) == Some(crate::pool::Place::Host)
                && state::card().is_ok_and(|mut card| card.host_free(dptr).is_some())
        }
    };
    if freed {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    crate::hold::maybe(bytesize);
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_device(dptr, bytesize, 0) }
}

pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, _flags: u32) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_device(dptr, bytesize, MANAGED) }
}

/// Rows padded to 512 bytes, like the driver's texture alignment.
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: u32,
) -> CUresult {
    if pitch.is_null() || !matches!(element_size, 4 | 8 | 16) || width == 0 || height == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let row = width.div_ceil(512) * 512;
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    let r = unsafe { alloc_device(dptr, row * height, 2) };
    if r == CUDA_SUCCESS {
        // SAFETY: the caller's out-pointer, valid by the driver API's contract.
        unsafe { *pitch = row };
    }
    r
}

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUipcMemHandle {
    pub reserved: [u8; 64],
}

/// `cuIpcGetMemHandle`: the handle's first 8 bytes carry the address.
pub unsafe extern "C" fn cuIpcGetMemHandle(handle: *mut CUipcMemHandle, dptr: CUdeviceptr) -> CUresult {
    if handle.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut h = CUipcMemHandle { reserved: [0; 64] };
    h.reserved[..8].copy_from_slice(&dptr.to_le_bytes());
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *handle = h };
    CUDA_SUCCESS
}

/// `cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle handle, flags)`:
/// the 64-byte handle is passed by value. The exporter's memory, charged to
/// nobody new.
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    _flags: u32,
) -> CUresult {
    if pdptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let addr = u64::from_le_bytes(handle.reserved[..8].try_into().unwrap());
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pdptr = addr };
    CUDA_SUCCESS
}

pub extern "C" fn cuIpcCloseMemHandle(_dptr: CUdeviceptr) -> CUresult {
    CUDA_SUCCESS
}

pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    free_device(dptr, 0)
}

pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    match mem_info() {
        // SAFETY: the caller's out-pointers, valid by the driver API's contract.
        Ok((f, t)) if !free.is_null() && !total.is_null() => unsafe {
            *free = f as usize;
            *total = t as usize;
            CUDA_SUCCESS
        },
        Ok(_) => CUDA_ERROR_INVALID_VALUE,
        Err(e) => e,
    }
}

/// The CUDA 2.0 form, in `unsigned int`: figures past 4 GiB read as the
/// largest that fits.
pub unsafe extern "C" fn cuMemGetInfo(free: *mut u32, total: *mut u32) -> CUresult {
    let narrow = |v: u64| v.min(u64::from(u32::MAX)) as u32;
    match mem_info() {
        // SAFETY: the caller's out-pointers, valid by the driver API's contract.
        Ok((f, t)) if !free.is_null() && !total.is_null() => unsafe {
            *free = narrow(f);
            *total = narrow(t);
            CUDA_SUCCESS
        },
        Ok(_) => CUDA_ERROR_INVALID_VALUE,
        Err(e) => e,
    }
}

/// (free, total) of the current context's device: its capacity, less what
/// every process holds on it.
fn mem_info() -> Result<(u64, u64), CUresult> {
    let dev = current_device()?;
    let card = state::card()?;
    let (capacity, used) = (card.capacity(), card.used(dev));
    Ok((capacity.saturating_sub(used), capacity))
}
