//! A simulated NVIDIA management library: `libnvidia-ml.so.1` with NVML's
//! symbols, signatures and return codes for what gpumem and frameworks
//! that size themselves from NVML ask (devices, names, UUIDs, memory, the
//! processes holding memory and how much), answered from the simulated
//! card the simulated driver charges (`simcard`). A test fixture and the
//! demo's stand-in, never part of the agent: the agent loads whatever
//! `libnvidia-ml.so.1` the library path gives it.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod devices;
mod memory;
mod processes;

use std::{
    ffi::{c_char, c_uint},
    sync::{Mutex, MutexGuard, OnceLock},
};

use simcard::{Card, Locked};

pub type NvmlReturn = c_uint;
pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// The card, once `nvmlInit` opened it.
fn card_cell() -> &'static Mutex<Option<Card>> {
    static CARD: OnceLock<Mutex<Option<Card>>> = OnceLock::new();
    CARD.get_or_init(|| Mutex::new(None))
}

/// Runs `f` on the card, or says NVML is not initialised.
fn with_card<T>(f: impl FnOnce(&Card) -> Result<T, NvmlReturn>) -> Result<T, NvmlReturn> {
    let cell: MutexGuard<'_, Option<Card>> = card_cell().lock().unwrap_or_else(|p| p.into_inner());
    f(cell.as_ref().ok_or(NVML_ERROR_UNINITIALIZED)?)
}

/// Runs `f` on the card under its lock.
fn with_locked<T>(f: impl FnOnce(&mut Locked<'_>) -> T) -> Result<T, NvmlReturn> {
    with_card(|c| c.lock().map(|mut l| f(&mut l)).map_err(|_| NVML_ERROR_UNKNOWN))
}

/// The code of a result.
fn code(r: Result<(), NvmlReturn>) -> NvmlReturn {
    r.err().unwrap_or(NVML_SUCCESS)
}

/// Copies `text` and a NUL into the caller's `len`-byte buffer; too small
/// is NVML's INSUFFICIENT_SIZE.
unsafe fn write_text(buf: *mut c_char, len: c_uint, text: &str) -> Result<(), NvmlReturn> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if text.len() + 1 > len as usize {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds `len` bytes (NVML's contract) and the text and
    // its NUL fit, checked above.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

fn init() -> NvmlReturn {
    let mut cell = card_cell().lock().unwrap_or_else(|p| p.into_inner());
    if cell.is_some() {
        return NVML_SUCCESS;
    }
    match Card::open(&simcard::path_from_env(), None) {
        Ok(c) => {
            *cell = Some(c);
            NVML_SUCCESS
        }
        Err(_) => NVML_ERROR_DRIVER_NOT_LOADED,
    }
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    NVML_SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let text: &'static [u8] = match result {
        NVML_SUCCESS => b"Success\0",
        NVML_ERROR_UNINITIALIZED => b"Uninitialized\0",
        NVML_ERROR_INVALID_ARGUMENT => b"Invalid Argument\0",
        NVML_ERROR_INSUFFICIENT_SIZE => b"Insufficient Size\0",
        NVML_ERROR_DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        _ => b"Unknown Error\0",
    };
    text.as_ptr().cast()
}

/// The simulated driver's version, as NVIDIA's drivers write theirs.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, len: c_uint) -> NvmlReturn {
    // SAFETY: the caller's buffer of `len` bytes, as NVML's contract says.
    code(unsafe { write_text(version, len, "580.95.05") })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, len: c_uint) -> NvmlReturn {
    // SAFETY: as above.
    code(unsafe { write_text(version, len, "13.580.95.05") })
}
