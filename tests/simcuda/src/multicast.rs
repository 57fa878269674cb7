//! Multicast objects, as NCCL uses them for NVLink SHARP: a handle with no
//! memory of its own, to which devices are added and physical memory
//! (`cuMemCreate`'s, already on the card) is bound; mapped and released
//! through the VMM calls like any handle.
use std::ffi::{c_int, c_ulonglong};

use crate::{
    cuda::{hand_out, CUdeviceptr, CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS},
    state,
    vmm::{empty_handle, is_handle},
};

/// `CUmulticastObjectProp`.
#[repr(C)]
pub struct MulticastProp {
    pub num_devices: u32,
    pub size: usize,
    pub handle_types: c_ulonglong,
    pub flags: c_ulonglong,
}

pub unsafe extern "C" fn cuMulticastCreate(mc: *mut u64, prop: *const MulticastProp) -> CUresult {
    // SAFETY: the caller's struct, checked non-null first.
    if mc.is_null() || prop.is_null() || unsafe { (*prop).num_devices == 0 || (*prop).size == 0 } {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: checked non-null above.
    unsafe { hand_out(mc, empty_handle()) }
}

/// A call on the multicast handle `mc`: fine if it is live and `ok`.
fn on(mc: u64, ok: bool) -> CUresult {
    if is_handle(mc) && ok {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

pub extern "C" fn cuMulticastAddDevice(mc: u64, dev: c_int) -> CUresult {
    on(mc, state::check_device(dev).is_ok())
}

pub extern "C" fn cuMulticastBindMem(
    mc: u64,
    _mc_offset: usize,
    mem: u64,
    _mem_offset: usize,
    size: usize,
    _flags: c_ulonglong,
) -> CUresult {
    on(mc, is_handle(mem) && size > 0)
}

pub extern "C" fn cuMulticastBindAddr(
    mc: u64,
    _mc_offset: usize,
    memptr: CUdeviceptr,
    size: usize,
    _flags: c_ulonglong,
) -> CUresult {
    on(mc, memptr != 0 && size > 0)
}

pub extern "C" fn cuMulticastUnbind(mc: u64, dev: c_int, _mc_offset: usize, size: usize) -> CUresult {
    on(mc, state::check_device(dev).is_ok() && size > 0)
}
