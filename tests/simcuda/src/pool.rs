//! Memory pools, each at a location: a device's (its memory, charged to
//! the card), the host's (pinned host memory) or managed. Every device
//! has a default pool, which is its current one until `cuDeviceSetMemPool`
//! makes another of its pools current (CUDA 13's `cuMemSetMemPool` is not
//! simulated);
//! the host and managed memory have default pools too (CUDA 13's
//! `cuMemGetDefaultMemPool`/`cuMemGetMemPool`). Allocations from a pool
//! take its location, whatever the caller's current device.
use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, OnceLock},
};

use crate::{
    cuda::{
        hand_out, CUdeviceptr, CUresult, Location, PropsHead, ALLOCATION_MANAGED, ALLOCATION_PINNED,
        CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, LOCATION_DEVICE, LOCATION_HOST,
        LOCATION_HOST_NUMA, LOCATION_NONE,
    },
    pool_stats::Stats,
    state,
};

/// Where a pool's memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    Device(i32),
    Host,
    /// Managed memory, preferring a device (or none).
    Managed(Option<i32>),
}

#[derive(Default)]
pub(crate) struct Pools {
    pub(crate) places: HashMap<u64, Place>,
    /// Each place's default pool, made at its first use.
    defaults: HashMap<Place, u64>,
    /// Current pools set for a place (else its default).
    current: HashMap<Place, u64>,
    /// Each live allocation from a pool: address -> (pool, its place,
    /// bytes); a destroyed pool's stay until freed, as on the driver.
    held: HashMap<u64, (u64, Place, u64)>,
    /// Each pool's attributes and figures (pool_attributes.rs).
    pub(crate) stats: HashMap<u64, Stats>,
}

pub(crate) fn pools() -> MutexGuard<'static, Pools> {
    static P: OnceLock<Mutex<Pools>> = OnceLock::new();
    P.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

impl Place {
    /// The place a location and allocation type name, if the driver
    /// accepts them.
    fn of(alloc_type: u32, at: &Location) -> Option<Place> {
        let device = || (at.id >= 0 && state::check_device(at.id).is_ok()).then_some(at.id);
        match (alloc_type, at.kind) {
            (ALLOCATION_PINNED, LOCATION_DEVICE) => device().map(Place::Device),
            (ALLOCATION_PINNED, LOCATION_HOST | LOCATION_HOST_NUMA) => Some(Place::Host),
            (ALLOCATION_MANAGED, LOCATION_DEVICE) => device().map(|d| Place::Managed(Some(d))),
            (ALLOCATION_MANAGED, LOCATION_NONE | LOCATION_HOST) => Some(Place::Managed(None)),
            _ => None,
        }
    }
}

impl Pools {
    fn default_of(&mut self, place: Place) -> Result<u64, CUresult> {
        if let Some(&h) = self.defaults.get(&place) {
            return Ok(h);
        }
        let h = state::card()?.handle();
        self.places.insert(h, place);
        self.defaults.insert(place, h);
        Ok(h)
    }

    fn current_of(&mut self, place: Place) -> Result<u64, CUresult> {
        match self.current.get(&place) {
            Some(&h) => Ok(h),
            None => self.default_of(place),
        }
    }
}

/// `cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)`.
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut u64, props: *const PropsHead) -> CUresult {
    if pool.is_null() || props.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's struct, checked non-null above.
    let props = unsafe { &*props };
    let Some(place) = Place::of(props.alloc_type, &props.location) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let made = state::card().map(|mut c| c.handle());
    if let Ok(h) = made {
        pools().places.insert(h, place);
    }
    // SAFETY: checked non-null above.
    unsafe { hand_out(pool, made) }
}

pub extern "C" fn cuMemPoolTrimTo(pool: u64, _min_bytes_to_keep: usize) -> CUresult {
    if pools().places.contains_key(&pool) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

/// A device's current pool falls back to its default when destroyed; a
/// default pool cannot be destroyed.
pub extern "C" fn cuMemPoolDestroy(pool: u64) -> CUresult {
    let mut p = pools();
    if p.defaults.values().any(|&h| h == pool) || p.places.remove(&pool).is_none() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    p.stats.remove(&pool);
    p.current.retain(|_, h| *h != pool);
    CUDA_SUCCESS
}

/// `cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)`.
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut u64, dev: i32) -> CUresult {
    if pool.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let made = state::check_device(dev).and_then(|()| pools().default_of(Place::Device(dev)));
    // SAFETY: checked non-null above.
    unsafe { hand_out(pool, made) }
}

/// `cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)`: its current pool.
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut u64, dev: i32) -> CUresult {
    if pool.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let made = state::check_device(dev).and_then(|()| pools().current_of(Place::Device(dev)));
    // SAFETY: checked non-null above.
    unsafe { hand_out(pool, made) }
}

/// `cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)`: a pool of that
/// device only.
pub extern "C" fn cuDeviceSetMemPool(dev: i32, pool: u64) -> CUresult {
    let mut p = pools();
    if p.places.get(&pool) != Some(&Place::Device(dev)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    p.current.insert(Place::Device(dev), pool);
    CUDA_SUCCESS
}

/// `cuMemGetDefaultMemPool(CUmemoryPool *pool, CUmemLocation *location,
/// CUmemAllocationType type)` (CUDA 13).
pub unsafe extern "C" fn cuMemGetDefaultMemPool(
    pool: *mut u64,
    at: *const Location,
    alloc_type: u32,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { pool_of_location(pool, at, alloc_type, false) }
}

/// `cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location,
/// CUmemAllocationType type)` (CUDA 13): the current pool.
pub unsafe extern "C" fn cuMemGetMemPool(pool: *mut u64, at: *const Location, alloc_type: u32) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { pool_of_location(pool, at, alloc_type, true) }
}

unsafe fn pool_of_location(pool: *mut u64, at: *const Location, alloc_type: u32, current: bool) -> CUresult {
    if pool.is_null() || at.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's struct, checked non-null above.
    let Some(place) = Place::of(alloc_type, unsafe { &*at }) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let mut p = pools();
    let made = if current { p.current_of(place) } else { p.default_of(place) };
    drop(p);
    // SAFETY: checked non-null above.
    unsafe { hand_out(pool, made) }
}

/// Allocates `bytes` from `pool` into `*dptr`: at the pool's place.
pub(crate) unsafe fn alloc_from(dptr: *mut CUdeviceptr, bytes: usize, pool: u64) -> CUresult {
    if dptr.is_null() || bytes == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // The device of a managed pool with no preference is the caller's,
    // resolved before any lock is taken (contexts are locked before the
    // card elsewhere).
    let current = crate::context::current_device();
    let mut p = pools();
    let Some(&place) = p.places.get(&pool) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let mut card = match state::card() {
        Ok(c) => c,
        Err(e) => return e,
    };
    let addr = match place {
        Place::Device(dev) => card.allocate(dev, bytes as u64, false, Some(pool)),
        Place::Managed(dev) => match dev.map_or(current, Ok) {
            Ok(dev) => card.allocate(dev, bytes as u64, true, Some(pool)),
            Err(e) => return e,
        },
        Place::Host => card.host_alloc(bytes as u64),
    };
    let Some(addr) = addr else { return CUDA_ERROR_OUT_OF_MEMORY };
    p.held.insert(addr, (pool, place, bytes as u64));
    p.stats.entry(pool).or_default().used(bytes as u64, true);
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { *dptr = addr };
    CUDA_SUCCESS
}

/// Allocates `bytes` from the current pool of the caller's device
/// (`cuMemAllocAsync`).
pub(crate) unsafe fn alloc_current(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    let pool = crate::context::current_device().and_then(|dev| pools().current_of(Place::Device(dev)));
    match pool {
        // SAFETY: the caller's pointers, passed on as the driver API received them.
        Ok(pool) => unsafe { alloc_from(dptr, bytes, pool) },
        Err(e) => e,
    }
}

/// Whether `addr` is a live allocation from a pool.
pub(crate) fn holds(addr: CUdeviceptr) -> bool {
    pools().held.contains_key(&addr)
}

/// Takes a pool's allocation at `addr` off its pool's figures: the place
/// it was at, or `None` when `addr` is not from a pool.
pub(crate) fn forget(addr: CUdeviceptr) -> Option<Place> {
    let mut p = pools();
    let (pool, place, bytes) = p.held.remove(&addr)?;
    if let Some(s) = p.stats.get_mut(&pool) {
        s.used(bytes, false);
    }
    Some(place)
}
