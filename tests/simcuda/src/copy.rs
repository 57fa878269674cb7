//! Copies and fills: the card's memory is real host memory (backing.rs),
//! so a copy is a `memcpy` done at the call (streams are not simulated:
//! an asynchronous copy is complete when it returns). The device side of
//! each copy must be memory the card handed out; host sides are the
//! caller's, as the driver takes them.
use std::ffi::c_void;

use crate::{
    cuda::{CUdeviceptr, CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS},
    state,
    streams::CUstream,
};

/// Which side(s) of a copy the card must own.
#[derive(Clone, Copy)]
enum Sides {
    /// Host to device: the destination.
    ToDevice,
    /// Device to host: the source.
    FromDevice,
    /// Device to device: both.
    Both,
    /// Unified addressing (`cuMemcpy`): whatever either side is.
    Any,
}

fn copy(dst: u64, src: u64, bytes: usize, sides: Sides) -> CUresult {
    if bytes == 0 {
        return CUDA_SUCCESS;
    }
    if dst == 0 || src == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let n = bytes as u64;
    let ok = match sides {
        Sides::ToDevice => card.touchable(dst, n),
        Sides::FromDevice => card.touchable(src, n),
        Sides::Both => card.touchable(dst, n) && card.touchable(src, n),
        Sides::Any => true,
    };
    drop(card);
    if !ok {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the device side(s) lie in the card's mapped windows or pinned
    // memory (checked above); host sides are the caller's, valid for
    // `bytes` by the driver API's contract. `copy` allows overlap.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
    CUDA_SUCCESS
}

fn fill(dst: CUdeviceptr, value: u32, width: usize, count: usize) -> CUresult {
    let Some(bytes) = width.checked_mul(count) else { return CUDA_ERROR_INVALID_VALUE };
    let card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    if count == 0 {
        return CUDA_SUCCESS;
    }
    if !card.touchable(dst, bytes as u64) || !dst.is_multiple_of(width as u64) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    drop(card);
    let pattern = value.to_le_bytes();
    // SAFETY: `[dst, dst + bytes)` lies in the card's memory (checked above).
    let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, bytes) };
    for chunk in out.chunks_exact_mut(width) {
        chunk.copy_from_slice(&pattern[..width]);
    }
    CUDA_SUCCESS
}

pub extern "C" fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) -> CUresult {
    copy(dst, src as u64, n, Sides::ToDevice)
}

pub extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    copy(dst as u64, src, n, Sides::FromDevice)
}

pub extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    copy(dst, src, n, Sides::Both)
}

pub extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    copy(dst, src, n, Sides::Any)
}

pub extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    _s: CUstream,
) -> CUresult {
    copy(dst, std::hint::black_box(src as u64), n, Sides::ToDevice)
}

pub extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    _s: CUstream,
) -> CUresult {
    copy(std::hint::black_box(dst as u64), src, n, Sides::FromDevice)
}

pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    _s: CUstream,
) -> CUresult {
    copy(std::hint::black_box(dst), src, n, Sides::Both)
}

pub extern "C" fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, _s: CUstream) -> CUresult {
    copy(std::hint::black_box(dst), src, n, Sides::Any)
}

pub extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, n: usize) -> CUresult {
    fill(dst, value.into(), 1, n)
}

pub extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, value: u32, n: usize) -> CUresult {
    fill(dst, value, 4, n)
}

pub extern "C" fn cuMemsetD8Async(dst: CUdeviceptr, value: u8, n: usize, _s: CUstream) -> CUresult {
    fill(std::hint::black_box(dst), value.into(), 1, n)
}

pub extern "C" fn cuMemsetD32Async(dst: CUdeviceptr, value: u32, n: usize, _s: CUstream) -> CUresult {
    fill(std::hint::black_box(dst), value, 4, n)
}
