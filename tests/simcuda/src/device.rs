//! Initialisation, the driver version and devices: `cuInit`,
//! `cuDriverGetVersion`, `cuDeviceGetCount`, `cuDeviceGet`,
//! `cuDeviceGetName`, `cuDeviceTotalMem_v2`.
use std::ffi::c_int;

use crate::{
    cuda::{
        CUdevice, CUresult, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
        CUDA_SUCCESS, DRIVER_VERSION,
    },
    state,
};

pub extern "C" fn cuInit(flags: u32) -> CUresult {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match state::init() {
        Ok(()) => CUDA_SUCCESS,
        Err(e) => e,
    }
}

pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    if version.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *version = DRIVER_VERSION };
    CUDA_SUCCESS
}

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

/// The CUDA 2.0 form, in `unsigned int` (a capacity past 4 GiB reads as
/// the largest that fits).
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut u32, dev: CUdevice) -> CUresult {
    if bytes.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *bytes = state::capacity().min(u64::from(u32::MAX)) as u32 };
    CUDA_SUCCESS
}

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
