//! The `families` scenario's memory pools: an allocation from a pool is
//! charged to the pool's location, whatever the caller's current device
//! (device 0 here): device 1's default pool, a host pool made by
//! `cuMemPoolCreate`, the host's current pool (CUDA 13's
//! `cuMemGetMemPool`), a managed pool; and a host-located `cuMemCreate`,
//! released.
use std::ffi::{c_int, c_void};

use crate::{
    driver::{check, Driver},
    truth::Truth,
};

type R = c_int;
type AllocPool = unsafe extern "C" fn(*mut u64, usize, u64, *mut c_void) -> R;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Location {
    pub kind: u32,
    pub id: c_int,
}

/// `CUmemPoolProps` (88 bytes); its head is `CUmemAllocationProp`'s, so
/// `cuMemCreate` takes it too.
#[repr(C)]
pub struct PoolProps {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location: Location,
    pub rest: [u8; 72],
}

pub const PINNED: u32 = 1;
pub const MANAGED: u32 = 2;
pub const DEVICE: u32 = 1;
pub const HOST: u32 = 2;

impl PoolProps {
    pub fn new(alloc_type: u32, kind: u32, id: c_int) -> Self {
        Self { alloc_type, handle_types: 0, location: Location { kind, id }, rest: [0; 72] }
    }
}

/// What the pools scenario frees before its `freed` checkpoint.
#[derive(Default)]
pub struct PoolsHeld {
    /// The allocation from device 1's default pool.
    pub on_dev1: u64,
    /// The allocation from the created host pool, and that pool.
    pub host: u64,
    pub host_pool: u64,
}

/// Makes a pool from `props`.
unsafe fn create(d: &Driver, props: &PoolProps) -> anyhow::Result<u64> {
    let f: unsafe extern "C" fn(*mut u64, *const PoolProps) -> R = d.sym("cuMemPoolCreate")?;
    let mut pool = 0;
    // SAFETY: see `run`.
    check(unsafe { f(&mut pool, props) }, "cuMemPoolCreate")?;
    Ok(pool)
}

/// Allocates `bytes` from `pool`.
unsafe fn alloc(d: &Driver, pool: u64, bytes: usize) -> anyhow::Result<u64> {
    let (mut p, f) = (0, d.sym::<AllocPool>("cuMemAllocFromPoolAsync")?);
    // SAFETY: see `run`.
    check(unsafe { f(&mut p, bytes, pool, std::ptr::null_mut()) }, "cuMemAllocFromPoolAsync")?;
    Ok(p)
}

/// Runs the pool allocations with device 0's context current.
///
/// # Safety
/// `d` is a CUDA driver; each symbol is loaded with its documented signature.
pub unsafe fn run(d: &Driver, t: &Truth, h: &mut PoolsHeld) -> anyhow::Result<()> {
    // SAFETY: every pointer passed is to a live local.
    unsafe {
        let by_device: unsafe extern "C" fn(*mut u64, c_int) -> R = d.sym("cuDeviceGetDefaultMemPool")?;
        let mut dev1 = 0;
        check(by_device(&mut dev1, 1), "cuDeviceGetDefaultMemPool")?;
        h.on_dev1 = alloc(d, dev1, 768 << 10)?;
        t.allocated_as("device", 1, 768 << 10);
        let current: unsafe extern "C" fn(*mut u64, c_int) -> R = d.sym("cuDeviceGetMemPool")?;
        let mut dev0 = 0;
        check(current(&mut dev0, 0), "cuDeviceGetMemPool")?;
        alloc(d, dev0, 128 << 10)?;
        t.allocated_as("device", 0, 128 << 10);

        h.host_pool = create(d, &PoolProps::new(PINNED, HOST, -1))?;
        h.host = alloc(d, h.host_pool, 3 << 20)?;
        t.allocated_as("host", 0, 3 << 20);
        let by_location: unsafe extern "C" fn(*mut u64, *const Location, u32) -> R =
            d.sym("cuMemGetMemPool")?;
        let mut host_current = 0;
        check(by_location(&mut host_current, &Location { kind: HOST, id: -1 }, PINNED), "cuMemGetMemPool")?;
        alloc(d, host_current, 5000)?;
        t.allocated_as("host", 0, 5000);
        let by_location: unsafe extern "C" fn(*mut u64, *const Location, u32) -> R =
            d.sym("cuMemGetDefaultMemPool")?;
        let mut managed_default = 0;
        check(
            by_location(&mut managed_default, &Location { kind: DEVICE, id: 1 }, MANAGED),
            "cuMemGetDefaultMemPool",
        )?;
        alloc(d, managed_default, 1 << 20)?;
        t.allocated_as("managed", 1, 1 << 20);
        let managed = create(d, &PoolProps::new(MANAGED, DEVICE, 0))?;
        alloc(d, managed, 2 << 20)?;
        t.allocated_as("managed", 0, 2 << 20);

        // Host-located physical memory (charged as host), released: its
        // handle is found where cuMemRelease looks.
        let create: unsafe extern "C" fn(*mut u64, usize, *const PoolProps, u64) -> R =
            d.sym("cuMemCreate")?;
        let mut handle = 0;
        check(create(&mut handle, 2 << 20, &PoolProps::new(PINNED, HOST, -1), 0), "cuMemCreate (host)")?;
        t.allocated_as("host", 0, 2 << 20);
        check(d.sym::<unsafe extern "C" fn(u64) -> R>("cuMemRelease")?(handle), "cuMemRelease (host)")?;
        t.freed_as("host", 0, 2 << 20);
    }
    Ok(())
}

/// Frees what `run` keeps in `h` (the rest is left to exit) and destroys
/// the host pool, whose handle is forgotten.
///
/// # Safety
/// As for [`run`].
pub unsafe fn free(d: &Driver, t: &Truth, h: &PoolsHeld) -> anyhow::Result<()> {
    type FreeStream = unsafe extern "C" fn(u64, *mut c_void) -> R;
    let null = std::ptr::null_mut();
    // SAFETY: see `run`.
    unsafe {
        check(d.sym::<FreeStream>("cuMemFreeAsync")?(h.on_dev1, null), "cuMemFreeAsync (device 1's pool)")?;
        t.freed_as("device", 1, 768 << 10);
        // The pool hands the block just freed out again (the simulated
        // driver gives the same address back, as a pool reuses its freed
        // memory): charged again, and freed.
        let by_device: unsafe extern "C" fn(*mut u64, c_int) -> R = d.sym("cuDeviceGetDefaultMemPool")?;
        let mut dev1 = 0;
        check(by_device(&mut dev1, 1), "cuDeviceGetDefaultMemPool")?;
        let again = alloc(d, dev1, 768 << 10)?;
        t.allocated_as("device", 1, 768 << 10);
        check(d.sym::<FreeStream>("cuMemFreeAsync")?(again, null), "cuMemFreeAsync (the block again)")?;
        t.freed_as("device", 1, 768 << 10);
        check(d.sym::<FreeStream>("cuMemFreeAsync")?(h.host, null), "cuMemFreeAsync (host pool)")?;
        t.freed_as("host", 0, 3 << 20);
        check(d.sym::<unsafe extern "C" fn(u64) -> R>("cuMemPoolDestroy")?(h.host_pool), "cuMemPoolDestroy")?;
    }
    Ok(())
}
