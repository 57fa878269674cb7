//! `cuGetErrorName` / `cuGetErrorString`: what clients print when a call
//! fails, for the codes this driver returns.
use std::ffi::{c_char, CStr};

use crate::cuda::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS};

/// (code, name, description), NUL-terminated for handing out.
const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
    (400, c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

unsafe fn describe(code: CUresult, out: *mut *const c_char, name: bool) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(&(_, n, d)) = ERRORS.iter().find(|(c, _, _)| *c == code) else {
        // SAFETY: the caller's out-pointer, checked non-null above.
        unsafe { *out = std::ptr::null() };
        return CUDA_ERROR_INVALID_VALUE;
    };
    // SAFETY: the caller's out-pointer, checked non-null above; the text is static.
    unsafe { *out = if name { n.as_ptr() } else { d.as_ptr() } };
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuGetErrorName(code: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { describe(code, out, true) }
}

pub unsafe extern "C" fn cuGetErrorString(code: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { describe(code, out, false) }
}
