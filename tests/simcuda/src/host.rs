//! Pinned host memory: cuMemAllocHost / cuMemHostAlloc / cuMemHostRegister
//! and their frees: real memory (backing.rs), not really pinned. Each free
//! takes its own kind only, as the driver's: `cuMemFreeHost` refuses
//! registered memory and `cuMemHostUnregister` memory the driver allocated
//! (which lies in the host window, registered memory outside it).
use std::ffi::{c_uint, c_void};

use crate::{
    backing::{HOST_BASE, WINDOW},
    cuda::{
        CUdeviceptr, CUresult, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
    },
    state,
};

unsafe fn alloc_host(pp: *mut *mut c_void, bytes: usize, _flags: c_uint) -> CUresult {
    if pp.is_null() || bytes == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let Some(addr) = card.host_alloc(bytes as u64) else { return CUDA_ERROR_OUT_OF_MEMORY };
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pp = addr as *mut c_void };
    CUDA_SUCCESS
}

fn free_host(p: *mut c_void, registered: bool) -> CUresult {
    let allocated = (HOST_BASE..HOST_BASE + WINDOW).contains(&(p as u64));
    if registered && allocated {
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    if !registered && !allocated {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // A host pool's allocation is freed by cuMemFreeAsync only (asked
    // before the card is locked: pools are locked before it elsewhere).
    if crate::pool::holds(p as u64) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    match card.host_free(p as u64) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_host(pp, bytesize, 0) }
}

pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { alloc_host(pp, bytesize, flags | 0x8000_0000) }
}

pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, _flags: c_uint) -> CUresult {
    if p.is_null() || bytesize == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    if card.host.contains_key(&(p as u64)) {
        return CUDA_ERROR_INVALID_VALUE; // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED in the driver
    }
    card.host.insert(p as u64, bytesize as u64);
    CUDA_SUCCESS
}

pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    free_host(p, false)
}

pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    free_host(p, true)
}

/// The device address of pinned host memory: with unified addressing (every
/// 64-bit driver) the host address itself, for an address inside a pinned
/// allocation or registration.
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    if pdptr.is_null() || flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let addr = p as u64;
    if !card.host.iter().any(|(&base, &len)| (base..base + len).contains(&addr)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { *pdptr = addr };
    CUDA_SUCCESS
}
