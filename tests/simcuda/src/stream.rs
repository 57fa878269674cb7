//! Stream-ordered allocation (from the current pool of the stream's
//! device, or from a pool: pool.rs). Streams are not simulated: the work
//! happens at the call, which is what the caller holds.
use std::ffi::c_void;

use crate::{
    cuda::{CUdeviceptr, CUresult, CUDA_SUCCESS},
    memory::{alloc_device, free_device},
    pool::{alloc_from, free_host_allocation},
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
    pool: u64,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_from(dptr, bytesize, std::hint::black_box(pool)) }
}

pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: u64,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_from(dptr, std::hint::black_box(bytesize), pool) }
}

/// A host pool's allocation, or device memory.
fn free_async(dptr: CUdeviceptr, how: u32) -> CUresult {
    if free_host_allocation(dptr) {
        return CUDA_SUCCESS;
    }
    free_device(dptr, how)
}

pub extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, _stream: CUstream) -> CUresult {
    free_async(dptr, 10)
}

pub extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, _stream: CUstream) -> CUresult {
    free_async(dptr, 11)
}
