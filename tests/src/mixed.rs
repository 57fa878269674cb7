//! Random allocations across families for the concurrency test: each
//! allocation remembers how it was made, so that any thread can free it
//! the matching way.
use std::ffi::{c_int, c_void};

use crate::{
    driver::{check, CuError, Driver, OUT_OF_MEMORY},
    pools::{self, PoolProps},
    truth::Truth,
};

type R = c_int;

#[derive(Clone, Copy, Debug)]
pub enum Method {
    Plain,
    Async,
    AsyncPtsz,
    /// `cuMemAllocFromPoolAsync` from one pool per process and device.
    Pool,
    Managed,
    Vmm,
}

pub const METHODS: [Method; 6] =
    [Method::Plain, Method::Async, Method::AsyncPtsz, Method::Pool, Method::Managed, Method::Vmm];

/// The process's memory pool on `device` (its allocations are that
/// device's), made at first use.
fn pool(d: &Driver, device: i32) -> anyhow::Result<u64> {
    static POOLS: std::sync::Mutex<Vec<(i32, u64)>> = std::sync::Mutex::new(Vec::new());
    let mut made = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, p)) = made.iter().find(|(dev, _)| *dev == device) {
        return Ok(p);
    }
    let props = PoolProps::new(pools::PINNED, pools::DEVICE, device);
    let mut handle = 0u64;
    // SAFETY: cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props).
    let create: unsafe extern "C" fn(*mut u64, *const PoolProps) -> R = unsafe { d.sym("cuMemPoolCreate")? };
    // SAFETY: as above; `handle` and `props` are live.
    check(unsafe { create(&mut handle, &props) }, "cuMemPoolCreate")?;
    made.push((device, handle));
    Ok(handle)
}

/// A live allocation: its address (or VMM handle and mapping).
#[derive(Clone, Copy, Debug)]
pub struct Held {
    pub method: Method,
    pub addr: u64,
    pub va: u64,
    pub size: u64,
    pub device: i32,
}

impl Method {
    fn kind(self) -> &'static str {
        match self {
            Method::Managed => "managed",
            Method::Vmm => "vmm",
            _ => "device",
        }
    }
}

/// Allocates `size` bytes the `method` way on `device` (the thread's
/// current context's device).
pub fn alloc(d: &Driver, t: &Truth, method: Method, size: u64, device: i32) -> anyhow::Result<Held> {
    let null = std::ptr::null_mut::<c_void>();
    let mut p = 0u64;
    let mut va = 0u64;
    // SAFETY: every symbol is used with the driver's documented signature.
    unsafe {
        match method {
            Method::Plain => check(
                d.sym::<unsafe extern "C" fn(*mut u64, usize) -> R>("cuMemAlloc_v2")?(&mut p, size as usize),
                "alloc",
            )?,
            Method::Async | Method::AsyncPtsz => {
                let name =
                    if matches!(method, Method::Async) { "cuMemAllocAsync" } else { "cuMemAllocAsync_ptsz" };
                check(
                    d.sym::<unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> R>(name)?(
                        &mut p,
                        size as usize,
                        null,
                    ),
                    name,
                )?
            }
            Method::Pool => {
                let f: unsafe extern "C" fn(*mut u64, usize, u64, *mut c_void) -> R =
                    d.sym("cuMemAllocFromPoolAsync")?;
                check(f(&mut p, size as usize, pool(d, device)?, null), "cuMemAllocFromPoolAsync")?
            }
            Method::Managed => check(
                d.sym::<unsafe extern "C" fn(*mut u64, usize, u32) -> R>("cuMemAllocManaged")?(
                    &mut p,
                    size as usize,
                    1,
                ),
                "managed",
            )?,
            Method::Vmm => {
                let prop = PoolProps::new(pools::PINNED, pools::DEVICE, device);
                let create: unsafe extern "C" fn(*mut u64, usize, *const PoolProps, u64) -> R =
                    d.sym("cuMemCreate")?;
                check(create(&mut p, size as usize, &prop, 0), "cuMemCreate")?;
                let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R =
                    d.sym("cuMemAddressReserve")?;
                check(reserve(&mut va, size as usize, 0, 0, 0), "cuMemAddressReserve")?;
                let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R = d.sym("cuMemMap")?;
                check(map(va, size as usize, 0, p, 0), "cuMemMap")?;
            }
        }
    }
    t.allocated_as(method.kind(), device, size);
    Ok(Held { method, addr: p, va, size, device })
}

/// Whether [`alloc`] failed because the allocation itself was refused
/// (out of memory: the card, or a deny limit), nothing held: not a VMM
/// mapping's later step, which leaves its handle made.
pub fn refused(e: &anyhow::Error) -> bool {
    e.downcast_ref::<CuError>().is_some_and(|c| {
        c.code == OUT_OF_MEMORY && !matches!(c.what.as_str(), "cuMemAddressReserve" | "cuMemMap")
    })
}

/// Frees `h` the way it was made. VMM handles are released before or after
/// their unmap as `release_first` says: either way one uncharge.
pub fn free(d: &Driver, t: &Truth, h: Held, release_first: bool) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<c_void>();
    // SAFETY: as in `alloc`.
    unsafe {
        match h.method {
            Method::Plain | Method::Managed => {
                check(d.sym::<unsafe extern "C" fn(u64) -> R>("cuMemFree_v2")?(h.addr), "free")?
            }
            Method::Async | Method::AsyncPtsz | Method::Pool => {
                let name = if matches!(h.method, Method::AsyncPtsz) {
                    "cuMemFreeAsync_ptsz"
                } else {
                    "cuMemFreeAsync"
                };
                check(d.sym::<unsafe extern "C" fn(u64, *mut c_void) -> R>(name)?(h.addr, null), name)?
            }
            Method::Vmm => {
                let release: unsafe extern "C" fn(u64) -> R = d.sym("cuMemRelease")?;
                let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
                if release_first {
                    check(release(h.addr), "cuMemRelease")?;
                    check(unmap(h.va, h.size as usize), "cuMemUnmap")?;
                } else {
                    check(unmap(h.va, h.size as usize), "cuMemUnmap")?;
                    check(release(h.addr), "cuMemRelease")?;
                }
            }
        }
    }
    t.freed_as(h.method.kind(), h.device, h.size);
    Ok(())
}
