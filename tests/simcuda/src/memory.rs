//! Device memory: cuMemAlloc / cuMemFree / cuMemGetInfo.
use crate::{
    context::current_device, state, CUdeviceptr, CUresult, CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};

/// Allocates `bytes` on the current context's device into `*dptr`.
unsafe fn alloc_device(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    if dptr.is_null() || bytes == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let dev = match current_device() {
        Ok(d) => d,
        Err(e) => return e,
    };
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    match card.allocate(dev, bytes as u64) {
        Some(addr) => {
            unsafe { *dptr = addr };
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

fn free_device(dptr: CUdeviceptr) -> CUresult {
    if dptr == 0 {
        return CUDA_SUCCESS; // freeing NULL is a no-op, as in the driver
    }
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    match card.release(dptr) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    unsafe { alloc_device(dptr, bytesize) }
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    free_device(dptr)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    if free.is_null() || total.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let dev = match current_device() {
        Ok(d) => d,
        Err(e) => return e,
    };
    let card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let used = card.devices[dev as usize].used;
    unsafe {
        *total = card.capacity as usize;
        *free = (card.capacity - used) as usize;
    }
    CUDA_SUCCESS
}
