//! Pool attributes (`cuMemPoolGetAttribute` / `cuMemPoolSetAttribute`,
//! the figures in pool_stats.rs) and access (`cuMemPoolSetAccess` /
//! `cuMemPoolGetAccess`): what the pool is (type, location) from its
//! place; devices other than a device pool's own given access by the caller.
use std::ffi::c_void;

use crate::{
    cuda::{
        AccessDesc, CUresult, Location, ALLOCATION_MANAGED, ALLOCATION_PINNED, CUDA_ERROR_INVALID_VALUE,
        CUDA_SUCCESS, LOCATION_DEVICE,
    },
    pool::{pools, Place},
    pool_stats::wide,
    state,
};

/// A pool's (allocation type, location type, location id).
fn what(place: Place) -> (u32, u32, i32) {
    match place {
        Place::Device(d) => (ALLOCATION_PINNED, 1, d),
        Place::Host => (ALLOCATION_PINNED, 2, 0),
        Place::Managed(d) => (ALLOCATION_MANAGED, d.map_or(0, |_| 1), d.unwrap_or(0)),
    }
}

pub unsafe extern "C" fn cuMemPoolGetAttribute(pool: u64, attr: u32, value: *mut c_void) -> CUresult {
    if value.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut p = pools();
    let Some(&place) = p.places.get(&pool) else { return CUDA_ERROR_INVALID_VALUE };
    let Some((v, wide)) = p.stats.entry(pool).or_default().get(attr, what(place)) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    // SAFETY: the caller's out-pointer, checked non-null above, holds the
    // attribute's type (a cuuint64_t or an int, by the driver API's contract).
    unsafe {
        if wide {
            *value.cast::<u64>() = v;
        } else {
            *value.cast::<i32>() = v as i32;
        }
    }
    CUDA_SUCCESS
}

pub unsafe extern "C" fn cuMemPoolSetAttribute(pool: u64, attr: u32, value: *const c_void) -> CUresult {
    if value.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's value, checked non-null above, of the attribute's type.
    let v = unsafe {
        if wide(attr) {
            *value.cast::<u64>()
        } else {
            *value.cast::<i32>() as u64
        }
    };
    let mut p = pools();
    if !p.places.contains_key(&pool) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if p.stats.entry(pool).or_default().set(attr, v) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

/// `cuMemPoolSetAccess(pool, const CUmemAccessDesc *map, count)`: devices
/// other than the pool's own may be given access (its own always has
/// read-write, and cannot be taken off).
pub unsafe extern "C" fn cuMemPoolSetAccess(pool: u64, map: *const AccessDesc, count: usize) -> CUresult {
    if map.is_null() && count > 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut p = pools();
    let Some(&place) = p.places.get(&pool) else { return CUDA_ERROR_INVALID_VALUE };
    let descs = if count == 0 {
        &[][..]
    } else {
        // SAFETY: `count` descriptors, by the driver API's contract; checked non-null.
        unsafe { std::slice::from_raw_parts(map, count) }
    };
    let valid = |d: &AccessDesc| {
        d.location.kind == LOCATION_DEVICE
            && state::check_device(d.location.id).is_ok()
            && matches!(d.flags, 0 | 1 | 3)
            && !(place == Place::Device(d.location.id) && d.flags != 3)
    };
    if !descs.iter().all(valid) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let s = p.stats.entry(pool).or_default();
    for d in descs {
        s.access.insert(d.location.id, d.flags);
    }
    CUDA_SUCCESS
}

/// `cuMemPoolGetAccess(CUmemAccess_flags *flags, pool, CUmemLocation *location)`.
pub unsafe extern "C" fn cuMemPoolGetAccess(flags: *mut u32, pool: u64, at: *const Location) -> CUresult {
    if flags.is_null() || at.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller's location, checked non-null above.
    let at = unsafe { &*at };
    let mut p = pools();
    let Some(&place) = p.places.get(&pool) else { return CUDA_ERROR_INVALID_VALUE };
    if at.kind != LOCATION_DEVICE || state::check_device(at.id).is_err() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let own = place == Place::Device(at.id);
    let got = if own { 3 } else { p.stats.entry(pool).or_default().access.get(&at.id).copied().unwrap_or(0) };
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { *flags = got };
    CUDA_SUCCESS
}
