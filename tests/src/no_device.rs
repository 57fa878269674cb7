//! A driver with no device behind it: NVIDIA's own library on a machine
//! without a GPU. Every allocation fails there with one CUresult, through
//! the same exported entry stubs a GPU's users call, whether the caller
//! found them with dlsym or, as libcudart and cuda-bindings do, with
//! `cuGetProcAddress_v2`. What a test can trace on NVIDIA's code here.
use std::ffi::{c_char, c_int, c_void, CStr};

use anyhow::bail;
use serde::{Deserialize, Serialize};

use crate::{driver::Driver, truth::Truth};

type R = c_int;
type AllocFn = unsafe extern "C" fn(*mut u64, usize) -> R;
type AllocAsyncFn = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> R;
type GetProcAddressFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> R;

/// `cuGetProcAddress_v2`'s flag for per-thread default streams.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// One call the scenario made: the entry point it reached, how it found
/// it, the bytes it asked for and what the driver answered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Call {
    /// The exported symbol the call went through, as the loader names the
    /// address called (dladdr).
    pub api: String,
    /// `dlsym`, or `cuGetProcAddress_v2(NAME, VERSION, FLAGS)`.
    pub via: String,
    pub size: u64,
    pub result: i32,
}

/// What the `no-device` scenario prints before its checkpoint: `cuInit`'s
/// result and every call it made.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Made {
    pub init: i32,
    pub calls: Vec<Call>,
}

/// The calls of one round, in order: (symbol asked for, CUDA version,
/// flags, whether it takes a stream). `None` for the version means dlsym.
const ROUND: [(&CStr, Option<c_int>, u64, bool); 4] = [
    (c"cuMemAlloc_v2", None, 0, false),
    (c"cuMemAlloc", Some(3020), 0, false),
    (c"cuMemAllocAsync", Some(11020), PER_THREAD_DEFAULT_STREAM, true),
    (c"cuMemAllocAsync", Some(11020), 0, true),
];

/// The exports a round's calls go through on NVIDIA's library (and the
/// simulated driver): what a test expects [`Call::api`] to be.
pub const ROUND_APIS: [&str; 4] =
    ["cuMemAlloc_v2", "cuMemAlloc_v2", "cuMemAllocAsync_ptsz", "cuMemAllocAsync"];

/// `cuInit(0)` (its result is returned), then `rounds` rounds of
/// [`ROUND`], each asking for `size` bytes; every call must fail (a
/// success means there is a device, and this scenario is the wrong one).
pub fn run(d: &Driver, t: &Truth, rounds: usize, size: u64) -> anyhow::Result<Made> {
    // SAFETY: cuInit's C signature.
    let init = unsafe { (d.init)(0) };
    // SAFETY: each type is its symbol's C signature.
    let (get_proc, alloc) =
        unsafe { (d.sym::<GetProcAddressFn>("cuGetProcAddress_v2")?, d.sym::<AllocFn>("cuMemAlloc_v2")?) };
    let mut calls = Vec::new();
    for _ in 0..rounds {
        for (symbol, version, flags, stream) in ROUND {
            let mut p = 0u64;
            let (result, via, f) = match version {
                None => {
                    // SAFETY: `alloc` is cuMemAlloc_v2; `p` is live.
                    (unsafe { alloc(&mut p, size as usize) }, "dlsym".to_string(), alloc as *mut c_void)
                }
                Some(v) => {
                    let f = resolve(get_proc, symbol, v, flags)?;
                    let via = format!("cuGetProcAddress_v2({}, {v}, {flags})", symbol.to_string_lossy());
                    // SAFETY: what cuGetProcAddress_v2 returned for this
                    // symbol has its C signature; a null stream is the
                    // default stream.
                    let r = unsafe {
                        if stream {
                            std::mem::transmute::<*mut c_void, AllocAsyncFn>(f)(
                                &mut p,
                                size as usize,
                                std::ptr::null_mut(),
                            )
                        } else {
                            std::mem::transmute::<*mut c_void, AllocFn>(f)(&mut p, size as usize)
                        }
                    };
                    (r, via, f)
                }
            };
            let api = symbol_of(f)?;
            if result == 0 {
                bail!("{api} (through {via}) succeeded: this driver has a device; use another scenario");
            }
            t.refused();
            calls.push(Call { api, via, size, result });
        }
    }
    Ok(Made { init, calls })
}

/// `cuGetProcAddress_v2(symbol, version, flags)`'s function pointer.
fn resolve(
    get_proc: GetProcAddressFn,
    symbol: &CStr,
    version: c_int,
    flags: u64,
) -> anyhow::Result<*mut c_void> {
    let (mut f, mut status) = (std::ptr::null_mut(), 0);
    // SAFETY: cuGetProcAddress_v2's C signature; the out-pointers are live.
    let r = unsafe { get_proc(symbol.as_ptr(), &mut f, version, flags, &mut status) };
    if r != 0 || f.is_null() {
        bail!("cuGetProcAddress_v2({symbol:?}, {version}, {flags}) returned {r} (status {status}, pointer {f:?})");
    }
    Ok(f)
}

/// The exported symbol at `f`, as the loader names it: which export a
/// function pointer from cuGetProcAddress_v2 is.
fn symbol_of(f: *mut c_void) -> anyhow::Result<String> {
    // SAFETY: Dl_info is plain data; all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the loader's tables; `info` is live.
    if unsafe { libc::dladdr(f, &mut info) } == 0 || info.dli_sname.is_null() {
        bail!("dladdr knows no symbol at {f:?}");
    }
    // SAFETY: dladdr's symbol name is a NUL-terminated string owned by the
    // loader, alive while the library is loaded.
    Ok(unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy().into_owned())
}
