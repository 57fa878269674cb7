//! Frees the driver refuses, beside frees it takes (`--scenario
//! failed-frees`): a `cuMemFree_v2` of an address never allocated and a
//! second one of an address already freed (both refused with
//! CUDA_ERROR_INVALID_VALUE; gpumem records this API's frees at their
//! entry, where a free of a live allocation is final), and a
//! `cuMemFreeAsync` of a live allocation on a stream that is not one
//! (refused with CUDA_ERROR_INVALID_HANDLE, the memory still allocated) and
//! a `cuMemHostUnregister` of pinned memory `cuMemHostAlloc` made (refused
//! with CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, still pinned): gpumem
//! records these frees at their return.
//!
//! Checkpoint `refused` after the refused frees (1 MiB, the 3 MiB
//! stream-ordered allocation and 1 MiB of pinned host memory held), then
//! `freed` after the stream-ordered allocation is freed on the default
//! stream and the pinned memory by `cuMemFreeHost` (1 MiB held until
//! exit).
use std::ffi::c_void;

use anyhow::bail;

use crate::{
    driver::{check, Driver},
    truth::Truth,
};

type R = crate::driver::CUresult;
type Free = unsafe extern "C" fn(u64) -> R;
type AllocStream = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> R;
type FreeStream = unsafe extern "C" fn(u64, *mut c_void) -> R;
type HostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> R;
type HostFree = unsafe extern "C" fn(*mut c_void) -> R;

const INVALID_VALUE: R = 1;
const INVALID_HANDLE: R = 400;
const HOST_MEMORY_NOT_REGISTERED: R = 713;
/// An address the simulated driver never hands out.
const NEVER_ALLOCATED: u64 = 0xdead_0000;
/// A stream handle nobody created.
const NO_STREAM: usize = 0x5eed;

/// Runs the scenario; see the module's docs.
pub fn run(d: &Driver, t: &Truth, checkpoint: &dyn Fn(&str) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let alloc = |bytes: usize| -> anyhow::Result<u64> {
        let p = d.alloc(bytes).map_err(|e| anyhow::anyhow!("cuMemAlloc_v2({bytes}) returned {e}"))?;
        t.allocated(bytes as u64);
        Ok(p)
    };
    let refused = |what: &str, got: R, want: R| -> anyhow::Result<()> {
        if got != want {
            bail!("{what} returned CUresult {got}, expected {want}");
        }
        Ok(())
    };
    alloc(1 << 20)?;
    let gone = alloc(2 << 20)?;
    d.free(gone)?;
    t.freed(2 << 20);
    // SAFETY: each symbol is loaded with the driver's documented signature;
    // the out-pointer is a live local.
    unsafe {
        let free: Free = d.sym("cuMemFree_v2")?;
        refused("cuMemFree_v2 of an address never allocated", free(NEVER_ALLOCATED), INVALID_VALUE)?;
        refused("cuMemFree_v2 of an address freed already", free(gone), INVALID_VALUE)?;
        let mut stream_ordered = 0u64;
        let alloc_async: AllocStream = d.sym("cuMemAllocAsync")?;
        check(alloc_async(&mut stream_ordered, 3 << 20, std::ptr::null_mut()), "cuMemAllocAsync")?;
        t.allocated(3 << 20);
        let free_async: FreeStream = d.sym("cuMemFreeAsync")?;
        let bad = free_async(stream_ordered, NO_STREAM as *mut c_void);
        refused("cuMemFreeAsync on a stream that is not one", bad, INVALID_HANDLE)?;
        let mut pinned = std::ptr::null_mut();
        check(d.sym::<HostAlloc>("cuMemHostAlloc")?(&mut pinned, 1 << 20, 0), "cuMemHostAlloc")?;
        t.allocated(1 << 20);
        let unregister: HostFree = d.sym("cuMemHostUnregister")?;
        let bad = unregister(pinned);
        refused("cuMemHostUnregister of cuMemHostAlloc's memory", bad, HOST_MEMORY_NOT_REGISTERED)?;
        checkpoint("refused")?;
        check(free_async(stream_ordered, std::ptr::null_mut()), "cuMemFreeAsync")?;
        t.freed(3 << 20);
        check(d.sym::<HostFree>("cuMemFreeHost")?(pinned), "cuMemFreeHost")?;
        t.freed(1 << 20);
    }
    checkpoint("freed")
}
