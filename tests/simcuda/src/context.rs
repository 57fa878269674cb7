//! Contexts: primary contexts per device, created contexts, and each
//! thread's current context (a stack, as push/pop use it).
use std::{
    cell::RefCell,
    collections::HashMap,
    ffi::{c_uint, c_void},
    sync::{Mutex, OnceLock},
};

use crate::{
    cuda::{
        hand_out, CUdevice, CUresult, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
    },
    state,
};

pub type CUcontext = *mut c_void;

/// Primary context handles are small fixed numbers per device; created
/// contexts count up from here.
const PRIMARY_BASE: usize = 0x1000;
const CREATED_BASE: usize = 0x10_0000;

struct Contexts {
    /// handle -> device
    devices: HashMap<usize, CUdevice>,
    primary_refs: HashMap<CUdevice, u32>,
    next: usize,
}

fn contexts() -> std::sync::MutexGuard<'static, Contexts> {
    static C: OnceLock<Mutex<Contexts>> = OnceLock::new();
    C.get_or_init(|| {
        Mutex::new(Contexts { devices: HashMap::new(), primary_refs: HashMap::new(), next: CREATED_BASE })
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The device of the calling thread's current context.
/// The calling thread's current device and the card, or why not.
pub fn current_card() -> Result<(i32, std::sync::MutexGuard<'static, state::Card>), CUresult> {
    let dev = current_device()?;
    Ok((dev, state::card()?))
}

pub fn current_device() -> Result<CUdevice, CUresult> {
    let ctx = STACK.with(|s| s.borrow().last().copied()).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    contexts().devices.get(&ctx).copied().ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

fn set_current(ctx: usize) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if ctx != 0 {
            s.push(ctx);
        }
    });
}

unsafe fn primary_retain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    if pctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    let handle = PRIMARY_BASE + dev as usize;
    let mut c = contexts();
    let refs = c.primary_refs.entry(dev).or_default();
    // The first retain makes the context: it costs the card memory.
    if *refs == 0 && !state::context_memory(dev, true) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *refs += 1;
    c.devices.insert(handle, dev);
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pctx = handle as CUcontext };
    CUDA_SUCCESS
}

fn primary_release(dev: CUdevice, version: u32) -> CUresult {
    let _ = std::hint::black_box(version);
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    let mut c = contexts();
    match c.primary_refs.get_mut(&dev) {
        Some(n) if *n > 0 => {
            *n -= 1;
            if *n == 0 {
                state::context_memory(dev, false);
            }
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_INVALID_CONTEXT,
    }
}

unsafe fn create(pctx: *mut CUcontext, dev: CUdevice, version: u32) -> CUresult {
    let _ = std::hint::black_box(version);
    if pctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = state::check_device(dev) {
        return e;
    }
    if !state::context_memory(dev, true) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    let handle = {
        let mut c = contexts();
        let h = c.next;
        c.next += 0x100;
        c.devices.insert(h, dev);
        h
    };
    // cuCtxCreate pushes the new context onto the calling thread's stack.
    STACK.with(|s| s.borrow_mut().push(handle));
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pctx = handle as CUcontext };
    CUDA_SUCCESS
}

fn destroy(ctx: CUcontext, _version: u32) -> CUresult {
    let h = ctx as usize;
    let removed = if h < CREATED_BASE { None } else { contexts().devices.remove(&h) };
    let Some(dev) = removed else {
        return CUDA_ERROR_INVALID_CONTEXT;
    };
    state::context_memory(dev, false);
    STACK.with(|s| s.borrow_mut().retain(|&c| c != h));
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { primary_retain(pctx, dev) }
}

pub extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    primary_release(dev, 1)
}

pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    primary_release(dev, 2)
}

pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, _flags: c_uint, dev: CUdevice) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(pctx, dev, 2) }
}

pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    destroy(ctx, 2)
}

pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    let h = ctx as usize;
    if h != 0 && !contexts().devices.contains_key(&h) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    set_current(h);
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    if pctx.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let h = STACK.with(|s| s.borrow().last().copied()).unwrap_or(0);
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pctx = h as CUcontext };
    CUDA_SUCCESS
}

pub extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    let h = ctx as usize;
    if !contexts().devices.contains_key(&h) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    STACK.with(|s| s.borrow_mut().push(h));
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    let Some(h) = STACK.with(|s| s.borrow_mut().pop()) else {
        return CUDA_ERROR_INVALID_CONTEXT;
    };
    if !pctx.is_null() {
        // SAFETY: the caller's out-pointer, valid by the driver API's contract.
        unsafe { *pctx = h as CUcontext };
    }
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    if dev.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: checked non-null above.
    unsafe { hand_out(dev, current_device()) }
}

/// The original (pre-3.2) entry point, same arguments as `_v2`.
pub unsafe extern "C" fn cuCtxCreate(pctx: *mut CUcontext, _flags: c_uint, dev: CUdevice) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(pctx, dev, 1) }
}

/// `cuCtxCreate_v3(pctx, CUexecAffinityParam *params, int numParams, flags, dev)`.
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    _num_params: std::ffi::c_int,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(pctx, dev, 3) }
}

/// `cuCtxCreate_v4(pctx, CUctxCreateParams *params, flags, dev)`.
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    _flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create(pctx, dev, 4) }
}

/// Work here is synchronous: nothing to wait for but a current context.
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    match current_device() {
        Ok(_) => CUDA_SUCCESS,
        Err(e) => e,
    }
}
