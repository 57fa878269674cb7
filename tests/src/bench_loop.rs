//! Loops of the bench (the workload's `loop` scenario) beyond a plain
//! alloc+free: `cuCtxSetCurrent`, and the stream-ordered pairs, what
//! PyTorch's `cudaMallocAsync` backend calls for each tensor: `cuMemAllocAsync` on the legacy stream
//! (from the device's current pool) or `cuMemAllocFromPoolAsync` from the
//! device's default pool, each followed by `cuMemFreeAsync`. The symbols
//! are looked up once, before the loop.
use std::ffi::c_void;

use anyhow::bail;

use crate::driver::{check, CUcontext, CUresult, Driver};

type AllocStream = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> CUresult;
type AllocPool = unsafe extern "C" fn(*mut u64, usize, u64, *mut c_void) -> CUresult;
type FreeStream = unsafe extern "C" fn(u64, *mut c_void) -> CUresult;
type DefaultPool = unsafe extern "C" fn(*mut u64, i32) -> CUresult;

/// Which allocation the loop times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolLoop {
    /// `cuMemAllocAsync` + `cuMemFreeAsync`.
    Async,
    /// `cuMemAllocFromPoolAsync` (the default pool) + `cuMemFreeAsync`.
    FromPool,
}

impl PoolLoop {
    /// The loop's name in the bench's output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Async => "pool_async",
            Self::FromPool => "pool_from_pool",
        }
    }
}

/// `n` pairs of `size` bytes on `device`'s pool. With `no_device` (a
/// driver with no GPU, NVIDIA's library here) every call is refused, the
/// same each time, through the same entry points.
pub fn pool(
    d: &Driver,
    which: PoolLoop,
    n: usize,
    size: usize,
    device: i32,
    no_device: bool,
) -> anyhow::Result<()> {
    let stream = std::ptr::null_mut();
    // SAFETY: each symbol is looked up with its C signature (cuda.h).
    let (alloc_async, alloc_pool, free, default_pool) = unsafe {
        (
            d.sym::<AllocStream>("cuMemAllocAsync")?,
            d.sym::<AllocPool>("cuMemAllocFromPoolAsync")?,
            d.sym::<FreeStream>("cuMemFreeAsync")?,
            d.sym::<DefaultPool>("cuDeviceGetDefaultMemPool")?,
        )
    };
    let mut pool = 0u64;
    if which == PoolLoop::FromPool && !no_device {
        // SAFETY: an out pointer to a handle.
        check(unsafe { default_pool(&mut pool, device) }, "cuDeviceGetDefaultMemPool")?;
    }
    for _ in 0..n {
        let mut p = 0u64;
        // SAFETY: an out pointer, a size, a pool handle the driver gave (or
        // 0, refused without a device), the legacy stream.
        let r = unsafe {
            match which {
                PoolLoop::Async => alloc_async(&mut p, size, stream),
                PoolLoop::FromPool => alloc_pool(&mut p, size, pool, stream),
            }
        };
        if no_device {
            // SAFETY: a free of nothing, refused.
            let _ = unsafe { free(0, stream) };
            continue;
        }
        if r != 0 {
            bail!("{} returned {r}", which.name());
        }
        // SAFETY: the allocation just made, on the stream it was made on.
        check(unsafe { free(p, stream) }, "cuMemFreeAsync")?;
    }
    Ok(())
}

/// `n` calls of `cuCtxSetCurrent` making `ctx` (a context's handle, as
/// the driver gave it) current again (what a
/// framework may call once per operation). Without a device the driver
/// refuses each, the same each time.
pub fn ctx_set_current(d: &Driver, ctx: usize, n: usize, no_device: bool) -> anyhow::Result<()> {
    for _ in 0..n {
        // SAFETY: cuCtxSetCurrent's C signature; a context the driver gave.
        let r = unsafe { (d.ctx_set_current)(ctx as CUcontext) };
        if r != 0 && !no_device {
            bail!("cuCtxSetCurrent returned {r}");
        }
    }
    Ok(())
}
