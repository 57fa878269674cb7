//! Devices: how many, their handles (the index plus one, never null),
//! names and UUIDs (the same as the simulated driver's).
use std::ffi::{c_char, c_uint, c_void};

use crate::{code, with_card, write_text, NvmlReturn, NVML_ERROR_INVALID_ARGUMENT};

pub type NvmlDevice = *mut c_void;

/// The index of `device`, if the card has it.
pub fn index_of(device: NvmlDevice) -> Result<u32, NvmlReturn> {
    let n = device as usize;
    let devices = with_card(|c| Ok(c.config().devices))?;
    if n == 0 || n > devices as usize {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(n as u32 - 1)
}

unsafe fn count(out: *mut c_uint) -> NvmlReturn {
    if out.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    code(with_card(|c| Ok(c.config().devices)).map(|n| {
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { *out = n };
    }))
}

unsafe fn handle(index: c_uint, out: *mut NvmlDevice) -> NvmlReturn {
    if out.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    code(index_of((index as usize + 1) as NvmlDevice).map(|i| {
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { *out = (i as usize + 1) as NvmlDevice };
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(out: *mut c_uint) -> NvmlReturn {
    // SAFETY: the caller's pointer, passed on.
    unsafe { count(out) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(out: *mut c_uint) -> NvmlReturn {
    // SAFETY: the caller's pointer, passed on.
    unsafe { count(out) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: the caller's pointer, passed on.
    unsafe { handle(index, out) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, out: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: the caller's pointer, passed on.
    unsafe { handle(index, out) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, out: *mut c_uint) -> NvmlReturn {
    if out.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    code(index_of(device).map(|i| {
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { *out = i };
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: NvmlDevice, name: *mut c_char, len: c_uint) -> NvmlReturn {
    // SAFETY: the caller's buffer of `len` bytes.
    code(index_of(device).and_then(|i| unsafe { write_text(name, len, &simcard::device_name(i)) }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: NvmlDevice, uuid: *mut c_char, len: c_uint) -> NvmlReturn {
    // SAFETY: the caller's buffer of `len` bytes.
    code(index_of(device).and_then(|i| unsafe { write_text(uuid, len, &simcard::device_uuid(i)) }))
}
