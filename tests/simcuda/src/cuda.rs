//! The driver API's types, result codes and the version this library
//! claims, and how a call hands a result out.
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
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// The driver version this library claims (CUDA 13.0).
pub const DRIVER_VERSION: c_int = 13000;

/// `CUmemAllocationType`.
pub const ALLOCATION_PINNED: u32 = 1;
pub const ALLOCATION_MANAGED: u32 = 2;
/// `CUmemLocationType`.
pub const LOCATION_NONE: u32 = 0;
pub const LOCATION_DEVICE: u32 = 1;
pub const LOCATION_HOST: u32 = 2;
pub const LOCATION_HOST_NUMA: u32 = 3;

/// `CUmemLocation`.
#[repr(C)]
pub struct Location {
    pub kind: u32,
    pub id: i32,
}

/// `CUmemAccessDesc`: who may access memory, and how
/// (`CUmemAccess_flags`: 0 none, 1 read, 3 read-write).
#[repr(C)]
pub struct AccessDesc {
    pub location: Location,
    pub flags: u32,
}

/// `CUmemPoolProps` and `CUmemAllocationProp` up to their location.
#[repr(C)]
pub struct PropsHead {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location: Location,
}

/// Writes a call's result through the caller's out-pointer, or returns
/// why there is none.
///
/// # Safety
/// `out` is valid for a write (each caller checks it is not null).
pub unsafe fn hand_out<T>(out: *mut T, result: Result<T, CUresult>) -> CUresult {
    match result {
        Ok(v) => {
            // SAFETY: the caller's promise about `out`.
            unsafe { *out = v };
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}
