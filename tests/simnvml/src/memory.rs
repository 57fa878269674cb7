//! A device's memory: its capacity, and what every process holds on it
//! (allocations and contexts), as the card counts them.
use std::ffi::c_uint;

use crate::{
    code, devices::index_of, devices::NvmlDevice, with_card, NvmlReturn, NVML_ERROR_INVALID_ARGUMENT,
};

/// `nvmlMemory_t`.
#[repr(C)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// (total, used) of `device`.
fn figures(device: NvmlDevice) -> Result<(u64, u64), NvmlReturn> {
    let dev = index_of(device)? as usize;
    with_card(|c| Ok((c.config().capacity, c.used(dev))))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut NvmlMemory) -> NvmlReturn {
    if memory.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    code(figures(device).map(|(total, used)| {
        // SAFETY: the caller's out-pointer, checked non-null.
        unsafe { *memory = NvmlMemory { total, free: total - used.min(total), used } };
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    if memory.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    code(figures(device).map(|(total, used)| {
        // SAFETY: the caller's out-pointer, checked non-null; the caller
        // set `version`, which is kept.
        unsafe {
            let m = &mut *memory;
            (m.total, m.reserved, m.free, m.used) = (total, 0, total - used.min(total), used);
        }
    }))
}
