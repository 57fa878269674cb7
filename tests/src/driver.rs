//! The CUDA driver functions the workload calls, loaded with dlopen from
//! whatever libcuda it is pointed at (the simulated one or a real one).
use std::ffi::{c_int, c_uint, c_void};

use anyhow::Context;
use libloading::{Library, Symbol};

pub type CUresult = c_int;
pub type CUcontext = *mut c_void;

pub struct Driver {
    lib: Library,
    /// The path it was loaded from, as given.
    pub path: String,
    pub init: unsafe extern "C" fn(c_uint) -> CUresult,
    pub device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CUresult,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut CUcontext, c_int) -> CUresult,
    pub ctx_set_current: unsafe extern "C" fn(CUcontext) -> CUresult,
    pub mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> CUresult,
    pub mem_free: unsafe extern "C" fn(u64) -> CUresult,
}

// SAFETY: the function pointers are plain C entry points of the driver,
// callable from any thread.
unsafe impl Send for Driver {}
// SAFETY: as for Send; nothing in a Driver changes after loading.
unsafe impl Sync for Driver {}

impl Driver {
    pub fn load(path: &str) -> anyhow::Result<Self> {
        // SAFETY: loading a shared library runs its initialisers; the
        // caller chose the library.
        let lib = unsafe { Library::new(path) }.with_context(|| format!("dlopen {path}"))?;
        unsafe fn get<T: Copy>(lib: &Library, name: &str) -> anyhow::Result<T> {
            // SAFETY: the caller names `T` as the symbol's C signature.
            let s: Symbol<T> =
                unsafe { lib.get(name.as_bytes()) }.with_context(|| format!("dlsym {name}"))?;
            Ok(*s)
        }
        // SAFETY: each field's type is its symbol's C signature.
        unsafe {
            Ok(Self {
                init: get(&lib, "cuInit")?,
                device_get: get(&lib, "cuDeviceGet")?,
                primary_ctx_retain: get(&lib, "cuDevicePrimaryCtxRetain")?,
                ctx_set_current: get(&lib, "cuCtxSetCurrent")?,
                mem_alloc: get(&lib, "cuMemAlloc_v2")?,
                mem_free: get(&lib, "cuMemFree_v2")?,
                lib,
                path: path.to_string(),
            })
        }
    }

    /// Any driver function, by symbol, as a function pointer of type `T`.
    ///
    /// # Safety
    /// `T` must be the symbol's real C signature.
    pub unsafe fn sym<T: Copy>(&self, name: &str) -> anyhow::Result<T> {
        // SAFETY: the caller's promise about `T`.
        let s: Symbol<T> =
            unsafe { self.lib.get(name.as_bytes()) }.with_context(|| format!("dlsym {name}"))?;
        Ok(*s)
    }

    /// cuInit, then make device `ordinal`'s primary context current on the
    /// calling thread.
    pub fn open_device(&self, ordinal: c_int) -> anyhow::Result<CUcontext> {
        // SAFETY: driver entry points with their C signatures, given
        // pointers to live locals.
        unsafe {
            check((self.init)(0), "cuInit")?;
            let mut dev = 0;
            check((self.device_get)(&mut dev, ordinal), "cuDeviceGet")?;
            let mut ctx = std::ptr::null_mut();
            check((self.primary_ctx_retain)(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
            check((self.ctx_set_current)(ctx), "cuCtxSetCurrent")?;
            Ok(ctx)
        }
    }

    /// Makes `ctx` (a handle from [`Self::open_device`], as a number so it
    /// can cross threads) current on the calling thread.
    pub fn set_current(&self, ctx: usize) -> anyhow::Result<()> {
        // SAFETY: a driver entry point with its C signature.
        check(unsafe { (self.ctx_set_current)(ctx as CUcontext) }, "cuCtxSetCurrent")
    }

    /// cuMemAlloc_v2: the address, or the CUresult.
    pub fn alloc(&self, bytes: usize) -> Result<u64, CUresult> {
        let mut p = 0u64;
        // SAFETY: a driver entry point with its C signature; `p` is live.
        match unsafe { (self.mem_alloc)(&mut p, bytes) } {
            0 => Ok(p),
            e => Err(e),
        }
    }

    pub fn free(&self, p: u64) -> anyhow::Result<()> {
        // SAFETY: a driver entry point with its C signature.
        check(unsafe { (self.mem_free)(p) }, "cuMemFree_v2")
    }
}

/// A driver call that returned an error: which, and its `CUresult`.
#[derive(Debug)]
pub struct CuError {
    pub what: String,
    pub code: CUresult,
}

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned CUresult {}", self.what, self.code)
    }
}

impl std::error::Error for CuError {}

/// `CUDA_ERROR_OUT_OF_MEMORY`: what the driver (or a deny limit) says when
/// an allocation does not fit.
pub const OUT_OF_MEMORY: CUresult = 2;

pub fn check(r: CUresult, what: &str) -> anyhow::Result<()> {
    if r != 0 {
        return Err(CuError { what: what.to_string(), code: r }.into());
    }
    Ok(())
}
