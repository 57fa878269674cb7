//! Random allocations across families for the concurrency test: each
//! allocation remembers how it was made, so that any thread can free it
//! the matching way.
use std::ffi::{c_int, c_void};

use anyhow::bail;

use crate::{driver::Driver, truth::Truth};

type R = c_int;

#[derive(Clone, Copy, Debug)]
pub enum Method {
    Plain,
    Async,
    AsyncPtsz,
    /// `cuMemAllocFromPoolAsync` from one pool per process.
    Pool,
    Managed,
    Vmm,
}

pub const METHODS: [Method; 6] =
    [Method::Plain, Method::Async, Method::AsyncPtsz, Method::Pool, Method::Managed, Method::Vmm];

/// The process's memory pool, made at first use.
fn pool(d: &Driver) -> anyhow::Result<u64> {
    static POOL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    if let Some(p) = POOL.get() {
        return Ok(*p);
    }
    let props = [0u8; 88];
    let mut handle = 0u64;
    // SAFETY: cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props).
    let create: unsafe extern "C" fn(*mut u64, *const u8) -> R = unsafe { d.sym("cuMemPoolCreate")? };
    // SAFETY: as above; `handle` and `props` are live.
    ok(unsafe { create(&mut handle, props.as_ptr()) }, "cuMemPoolCreate")?;
    Ok(*POOL.get_or_init(|| handle))
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

fn ok(r: R, what: &str) -> anyhow::Result<()> {
    if r != 0 {
        bail!("{what} returned CUresult {r}");
    }
    Ok(())
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

/// `CUmemAllocationProp` on device `id`.
#[repr(C)]
struct Prop {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: c_int,
    meta: usize,
    flags: [u8; 8],
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
            Method::Plain => ok(
                d.sym::<unsafe extern "C" fn(*mut u64, usize) -> R>("cuMemAlloc_v2")?(&mut p, size as usize),
                "alloc",
            )?,
            Method::Async | Method::AsyncPtsz => {
                let name =
                    if matches!(method, Method::Async) { "cuMemAllocAsync" } else { "cuMemAllocAsync_ptsz" };
                ok(
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
                ok(f(&mut p, size as usize, pool(d)?, null), "cuMemAllocFromPoolAsync")?
            }
            Method::Managed => ok(
                d.sym::<unsafe extern "C" fn(*mut u64, usize, u32) -> R>("cuMemAllocManaged")?(
                    &mut p,
                    size as usize,
                    1,
                ),
                "managed",
            )?,
            Method::Vmm => {
                let prop = Prop {
                    alloc_type: 1,
                    handle_types: 0,
                    location_type: 1,
                    location_id: device,
                    meta: 0,
                    flags: [0; 8],
                };
                let create: unsafe extern "C" fn(*mut u64, usize, *const Prop, u64) -> R =
                    d.sym("cuMemCreate")?;
                ok(create(&mut p, size as usize, &prop, 0), "cuMemCreate")?;
                let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R =
                    d.sym("cuMemAddressReserve")?;
                ok(reserve(&mut va, size as usize, 0, 0, 0), "cuMemAddressReserve")?;
                let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R = d.sym("cuMemMap")?;
                ok(map(va, size as usize, 0, p, 0), "cuMemMap")?;
            }
        }
    }
    t.allocated_as(method.kind(), device, size);
    Ok(Held { method, addr: p, va, size, device })
}

/// Frees `h` the way it was made. VMM handles are released before or after
/// their unmap as `release_first` says: either way one uncharge.
pub fn free(d: &Driver, t: &Truth, h: Held, release_first: bool) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<c_void>();
    // SAFETY: as in `alloc`.
    unsafe {
        match h.method {
            Method::Plain | Method::Managed => {
                ok(d.sym::<unsafe extern "C" fn(u64) -> R>("cuMemFree_v2")?(h.addr), "free")?
            }
            Method::Async | Method::AsyncPtsz | Method::Pool => {
                let name = if matches!(h.method, Method::AsyncPtsz) {
                    "cuMemFreeAsync_ptsz"
                } else {
                    "cuMemFreeAsync"
                };
                ok(d.sym::<unsafe extern "C" fn(u64, *mut c_void) -> R>(name)?(h.addr, null), name)?
            }
            Method::Vmm => {
                let release: unsafe extern "C" fn(u64) -> R = d.sym("cuMemRelease")?;
                let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
                if release_first {
                    ok(release(h.addr), "cuMemRelease")?;
                    ok(unmap(h.va, h.size as usize), "cuMemUnmap")?;
                } else {
                    ok(unmap(h.va, h.size as usize), "cuMemUnmap")?;
                    ok(release(h.addr), "cuMemRelease")?;
                }
            }
        }
    }
    t.freed_as(h.method.kind(), h.device, h.size);
    Ok(())
}
