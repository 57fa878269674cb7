//! The processes holding memory on a device, and how much each (its
//! allocations and its contexts), in the three layouts NVML has had.
use std::ffi::c_uint;

use crate::{
    code, devices::index_of, devices::NvmlDevice, with_locked, NvmlReturn, NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
};

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_t` (v2 and v3).
#[repr(C)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// Writes the processes on `device` into the caller's `count` entries
/// (through `put`), or says how many there are.
unsafe fn list(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: bool,
    put: impl Fn(usize, u32, u64),
) -> NvmlReturn {
    if count.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let found = index_of(device).and_then(|d| with_locked(|c| c.processes(d as usize)));
    code(found.and_then(|procs| {
        // SAFETY: the caller's count, checked non-null.
        let room = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = procs.len() as c_uint };
        if procs.len() > room || (!infos && !procs.is_empty()) {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, (pid, bytes)) in procs.into_iter().enumerate() {
            put(i, pid, bytes);
        }
        Ok(())
    }))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    let put = |i: usize, pid, bytes| {
        let info = ProcessInfo {
            pid,
            used_gpu_memory: bytes,
            gpu_instance_id: u32::MAX,
            compute_instance_id: u32::MAX,
        };
        // SAFETY: `i` is below the caller's count of entries at `infos`.
        unsafe { infos.add(i).write(info) };
    };
    // SAFETY: the caller's pointers, checked in `list`.
    unsafe { list(device, count, !infos.is_null(), put) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: the same layout as v3's.
    unsafe { nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> NvmlReturn {
    let put = |i: usize, pid, bytes| {
        // SAFETY: `i` is below the caller's count of entries at `infos`.
        unsafe { infos.add(i).write(ProcessInfoV1 { pid, used_gpu_memory: bytes }) };
    };
    // SAFETY: the caller's pointers, checked in `list`.
    unsafe { list(device, count, !infos.is_null(), put) }
}
