//! The driver API's types, result codes and the version this library claims.
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
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// The driver version this library claims (CUDA 13.0).
pub const DRIVER_VERSION: c_int = 13000;
