//! Stream-ordered allocation (from the current pool of the stream's
//! device, or from a pool: pool.rs). Streams are not simulated: the work
//! happens at the call, which is what the caller holds. A free on a
//! stream that is not one fails as on the driver, the memory still
//! allocated.
use crate::{
    cuda::{CUdeviceptr, CUresult, CUDA_ERROR_INVALID_HANDLE},
    memory::free_device,
    pool::{alloc_current, alloc_from},
    streams::{is_stream, CUstream},
};

pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_current(dptr, std::hint::black_box(bytesize)) }
}

pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    _stream: CUstream,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_current(std::hint::black_box(dptr), bytesize) }
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

pub extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    if !is_stream(stream) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    free_device(dptr, 10)
}

pub extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
    if !is_stream(stream) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    free_device(dptr, 11)
}
