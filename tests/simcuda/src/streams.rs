//! Streams and events. Work happens at the call (a copy is done when it
//! returns), so every stream is always idle and every recorded event
//! complete; what is kept is which handles are live, so destroying one
//! twice or using a made-up one fails as it does on the driver, and when
//! each event was recorded, for `cuEventElapsedTime`.
use std::{
    collections::HashMap,
    ffi::{c_int, c_uint, c_void},
    sync::{Mutex, MutexGuard, OnceLock},
    time::Instant,
};

use crate::{
    cuda::{hand_out, CUresult, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS},
    state,
};

pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;

/// The legacy and per-thread default streams' handles, always valid.
const LEGACY: u64 = 1;
const PER_THREAD: u64 = 2;
/// `CUDA_ERROR_NOT_READY`: an event never recorded.
const NOT_READY: CUresult = 600;

#[derive(Default)]
struct Objects {
    streams: HashMap<u64, c_int>,
    /// event -> when it was last recorded (None: never).
    events: HashMap<u64, Option<Instant>>,
}

fn objects() -> MutexGuard<'static, Objects> {
    static O: OnceLock<Mutex<Objects>> = OnceLock::new();
    O.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `s` is a stream handle: a default stream's or a live one.
pub(crate) fn is_stream(s: CUstream) -> bool {
    let s = s as u64;
    s == 0 || s == LEGACY || s == PER_THREAD || objects().streams.contains_key(&s)
}

unsafe fn create_stream(out: *mut CUstream, priority: c_int) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let made = state::card().map(|mut c| c.handle()).map(|h| {
        objects().streams.insert(h, priority);
        h as CUstream
    });
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { hand_out(out, made) }
}

pub unsafe extern "C" fn cuStreamCreate(out: *mut CUstream, _flags: c_uint) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create_stream(out, 0) }
}

pub unsafe extern "C" fn cuStreamCreateWithPriority(
    out: *mut CUstream,
    _flags: c_uint,
    priority: c_int,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { create_stream(out, priority.clamp(-5, 0)) }
}

pub extern "C" fn cuStreamDestroy_v2(s: CUstream) -> CUresult {
    match objects().streams.remove(&(s as u64)) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_HANDLE,
    }
}

pub extern "C" fn cuStreamSynchronize(s: CUstream) -> CUresult {
    if is_stream(s) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_HANDLE
    }
}

pub extern "C" fn cuStreamQuery(s: CUstream) -> CUresult {
    if is_stream(std::hint::black_box(s)) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_HANDLE
    }
}

pub extern "C" fn cuStreamWaitEvent(s: CUstream, e: CUevent, _flags: c_uint) -> CUresult {
    if is_stream(s) && objects().events.contains_key(&(e as u64)) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_HANDLE
    }
}

pub unsafe extern "C" fn cuStreamGetPriority(s: CUstream, out: *mut c_int) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let p = if is_stream(s) {
        Ok(objects().streams.get(&(s as u64)).copied().unwrap_or(0))
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    };
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { hand_out(out, p) }
}

/// Priorities run from 0 (least) to -5 (greatest), as on recent cards.
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    // SAFETY: the caller's out-pointers, each written only when not null.
    unsafe {
        if !least.is_null() {
            *least = 0;
        }
        if !greatest.is_null() {
            *greatest = -5;
        }
    }
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuEventCreate(out: *mut CUevent, _flags: c_uint) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let made = state::card().map(|mut c| c.handle()).map(|h| {
        objects().events.insert(h, None);
        h as CUevent
    });
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { hand_out(out, made) }
}

fn record(e: CUevent, s: CUstream) -> CUresult {
    if !is_stream(s) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    match objects().events.get_mut(&(e as u64)) {
        Some(at) => {
            *at = Some(Instant::now());
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_HANDLE,
    }
}

pub extern "C" fn cuEventRecord(e: CUevent, s: CUstream) -> CUresult {
    record(e, s)
}

pub extern "C" fn cuEventRecordWithFlags(e: CUevent, s: CUstream, _flags: c_uint) -> CUresult {
    record(std::hint::black_box(e), s)
}

fn recorded(e: CUevent) -> Result<Instant, CUresult> {
    match objects().events.get(&(e as u64)) {
        Some(Some(at)) => Ok(*at),
        Some(None) => Err(NOT_READY),
        None => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// Complete once recorded (work is done at the call); a never-recorded
/// event is complete too, as on the driver.
pub extern "C" fn cuEventSynchronize(e: CUevent) -> CUresult {
    match recorded(e) {
        Ok(_) | Err(NOT_READY) => CUDA_SUCCESS,
        Err(err) => err,
    }
}

pub extern "C" fn cuEventQuery(e: CUevent) -> CUresult {
    match recorded(std::hint::black_box(e)) {
        Ok(_) | Err(NOT_READY) => CUDA_SUCCESS,
        Err(err) => err,
    }
}

pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    if ms.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // An event never recorded has no time: an invalid handle here.
    let at = |e| recorded(e).map_err(|err| if err == NOT_READY { CUDA_ERROR_INVALID_HANDLE } else { err });
    let t = at(start).and_then(|a| at(end).map(|b| b.saturating_duration_since(a).as_secs_f32() * 1000.0));
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { hand_out(ms, t) }
}

pub extern "C" fn cuEventDestroy_v2(e: CUevent) -> CUresult {
    match objects().events.remove(&(e as u64)) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_HANDLE,
    }
}

/// Never capturing: graphs are not simulated (`CU_STREAM_CAPTURE_STATUS_NONE`).
pub unsafe extern "C" fn cuStreamIsCapturing(s: CUstream, status: *mut c_int) -> CUresult {
    if status.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let st = if is_stream(s) { Ok(0) } else { Err(CUDA_ERROR_INVALID_HANDLE) };
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { hand_out(status, st) }
}

/// A stream's id: its handle.
pub unsafe extern "C" fn cuStreamGetId(s: CUstream, id: *mut u64) -> CUresult {
    if id.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let got = if is_stream(s) { Ok(s as u64) } else { Err(CUDA_ERROR_INVALID_HANDLE) };
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { hand_out(id, got) }
}
