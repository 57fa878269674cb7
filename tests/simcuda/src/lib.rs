//! A simulated CUDA driver: `libcuda.so.1` with the real driver API's
//! symbols, versioned names, signatures and CUresult codes, backed by a
//! bookkeeping "card" instead of a GPU.
//!
//! It is a test fixture and the demo's stand-in GPU, never part of the
//! agent. Each device has a capacity (`SIMCUDA_CAPACITY` bytes, default
//! 16 GiB; `SIMCUDA_DEVICES` devices, default 2) and allocations beyond it
//! fail with `CUDA_ERROR_OUT_OF_MEMORY` as a full card would. Capacity is
//! per process: the simulation keeps no state shared between processes.
//!
//! Every exported function has its own body (they call shared helpers with
//! different arguments), so no two exports are folded to one address:
//! uprobes on two symbols must mean two functions, as in the real driver.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod array;
mod context;
mod host;
mod memory;
mod procaddr;
mod state;
mod stream;
mod vmm;

pub use array::*;
pub use context::*;
pub use host::*;
pub use memory::*;
pub use procaddr::*;
pub use stream::*;
pub use vmm::*;

use std::ffi::c_int;

/// `CUresult`.
pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;

/// The driver version this library claims (CUDA 13.0).
pub const DRIVER_VERSION: c_int = 13000;

#[no_mangle]
pub extern "C" fn cuInit(flags: u32) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    state::init();
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    if version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *version = DRIVER_VERSION };
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    if count.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(n) = state::device_count() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *count = n };
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    if device.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(n) = state::device_count() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    if ordinal < 0 || ordinal >= n {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *device = ordinal };
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut u8, len: c_int, dev: CUdevice) -> CUresult {
    if name.is_null() || len <= 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    let text = format!("simcuda device {dev}\0");
    let n = text.len().min(len as usize);
    // SAFETY: `name` holds `len` bytes (the driver API's contract) and `n <= len`.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), name, n) };
    // SAFETY: `name` holds `len` bytes (the driver API's contract) and `n <= len`.
    unsafe { *name.add(n - 1) = 0 };
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    if bytes.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *bytes = state::capacity() as usize };
    CUDA_SUCCESS
}
