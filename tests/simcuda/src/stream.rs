//! Stream-ordered allocation and memory pools. Streams are not simulated:
//! the work happens at the call, which is what the caller holds.
use std::ffi::c_void;

use crate::{
    cuda::{CUdeviceptr, CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS},
    memory::{alloc_device, free_device},
    state,
};

pub type CUstream = *mut c_void;

pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_device(dptr, bytesize, 10) }
}

pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_device(dptr, bytesize, 11) }
}

pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    _pool: u64,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_device(dptr, bytesize, 12) }
}

pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    _pool: u64,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_device(dptr, bytesize, 13) }
}

pub extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, _stream: CUstream) -> CUresult {
    free_device(dptr, 10)
}

pub extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, _stream: CUstream) -> CUresult {
    free_device(dptr, 11)
}

/// `cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)`.
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut u64, props: *const c_void) -> CUresult {
    if pool.is_null() || props.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match state::card() {
        Ok(mut c) => {
            // SAFETY: the caller's out-pointer, valid by the driver API's contract.
            unsafe { *pool = c.handle() };
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

pub extern "C" fn cuMemPoolTrimTo(pool: u64, _min_bytes_to_keep: usize) -> CUresult {
    if pool == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}

pub extern "C" fn cuMemPoolDestroy(pool: u64) -> CUresult {
    if pool == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}
