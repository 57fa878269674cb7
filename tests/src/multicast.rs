//! The `families` scenario's multicast object, as NCCL makes one for
//! NVLink SHARP: created, a device added, physical memory bound by handle
//! and by address, unbound, mapped and released. Nothing it touches is
//! charged again (the memory was charged at its `cuMemCreate`).
use std::ffi::{c_int, c_ulonglong};

use crate::driver::{check, Driver};

type R = c_int;

/// `CUmulticastObjectProp`.
#[repr(C)]
struct MulticastProp {
    num_devices: u32,
    size: usize,
    handle_types: c_ulonglong,
    flags: c_ulonglong,
}

/// Runs the multicast calls over `mem` (a live VMM handle) and `va` (an
/// address mapped to `size` bytes of physical memory).
///
/// # Safety
/// `d` is a CUDA driver; each symbol is loaded with its documented signature.
pub unsafe fn run(d: &Driver, mem: u64, va: u64, size: usize) -> anyhow::Result<()> {
    let prop = MulticastProp { num_devices: 1, size, handle_types: 0, flags: 0 };
    let mut mc = 0u64;
    // SAFETY: every pointer passed is to a live local.
    unsafe {
        let create: unsafe extern "C" fn(*mut u64, *const MulticastProp) -> R = d.sym("cuMulticastCreate")?;
        check(create(&mut mc, &prop), "cuMulticastCreate")?;
        let add: unsafe extern "C" fn(u64, c_int) -> R = d.sym("cuMulticastAddDevice")?;
        check(add(mc, 0), "cuMulticastAddDevice")?;
        let bind_mem: unsafe extern "C" fn(u64, usize, u64, usize, usize, u64) -> R =
            d.sym("cuMulticastBindMem")?;
        check(bind_mem(mc, 0, mem, 0, size, 0), "cuMulticastBindMem")?;
        let bind_addr: unsafe extern "C" fn(u64, usize, u64, usize, u64) -> R =
            d.sym("cuMulticastBindAddr")?;
        check(bind_addr(mc, 0, va, size, 0), "cuMulticastBindAddr")?;
        let unbind: unsafe extern "C" fn(u64, c_int, usize, usize) -> R = d.sym("cuMulticastUnbind")?;
        check(unbind(mc, 0, 0, size), "cuMulticastUnbind")?;
        let mut mc_va = 0u64;
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R =
            d.sym("cuMemAddressReserve")?;
        check(reserve(&mut mc_va, size, 0, 0, 0), "cuMemAddressReserve")?;
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R = d.sym("cuMemMap")?;
        check(map(mc_va, size, 0, mc, 0), "cuMemMap (multicast)")?;
        let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
        check(unmap(mc_va, size), "cuMemUnmap (multicast)")?;
        let release: unsafe extern "C" fn(u64) -> R = d.sym("cuMemRelease")?;
        check(release(mc), "cuMemRelease (multicast)")?;
    }
    Ok(())
}
