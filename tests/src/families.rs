//! The `families` scenario: one process through every allocation family
//! gpumem covers, with known sizes, on two devices. Ground truth is split
//! by memory kind and device, the way gpumem reports it.
use std::ffi::{c_int, c_uint, c_void};

use anyhow::{bail, Context};

use crate::{driver::Driver, truth::Truth};

type R = c_int;

/// A driver call that must succeed.
fn ok(r: R, what: &str) -> anyhow::Result<()> {
    if r != 0 {
        bail!("{what} returned CUresult {r}");
    }
    Ok(())
}

#[repr(C)]
struct ArrayDesc {
    width: usize,
    height: usize,
    format: u32,
    channels: u32,
}

#[repr(C)]
struct Array3DDesc {
    width: usize,
    height: usize,
    depth: usize,
    format: u32,
    channels: u32,
    flags: u32,
}

/// `CUmemAllocationProp`, as the driver lays it out.
#[repr(C)]
#[derive(Default)]
struct AllocProp {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: c_int,
    win32_meta: usize,
    alloc_flags: [u8; 8],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct IpcHandle([u8; 64]);

const FLOAT: u32 = 0x20;
const UINT8: u32 = 0x01;
const PINNED: u32 = 1;
const LOCATION_DEVICE: u32 = 1;

/// Runs the scenario; `checkpoint` prints (and pauses on) the truth.
pub fn run(
    d: &Driver,
    t: &Truth,
    ctx0: usize,
    checkpoint: &dyn Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    // SAFETY: every symbol is loaded with the driver's documented signature.
    unsafe { run_unsafe(d, t, ctx0, checkpoint) }
}

unsafe fn run_unsafe(
    d: &Driver,
    t: &Truth,
    ctx0: usize,
    checkpoint: &dyn Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<c_void>();
    type Alloc = unsafe extern "C" fn(*mut u64, usize) -> R;
    type AllocFlags = unsafe extern "C" fn(*mut u64, usize, c_uint) -> R;
    type AllocStream = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> R;
    type AllocPool = unsafe extern "C" fn(*mut u64, usize, u64, *mut c_void) -> R;
    type FreeStream = unsafe extern "C" fn(u64, *mut c_void) -> R;
    type Handle1 = unsafe extern "C" fn(u64) -> R;
    let mut p = 0u64;

    // Device memory on device 0.
    unsafe {
        ok(d.sym::<Alloc>("cuMemAlloc_v2")?(&mut p, 1 << 20), "cuMemAlloc_v2")?;
        let plain = p;
        t.allocated_as("device", 0, 1 << 20);
        let mut pitch = 0usize;
        let f: unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> R =
            d.sym("cuMemAllocPitch_v2")?;
        ok(f(&mut p, &mut pitch, 1000, 10, 4), "cuMemAllocPitch_v2")?;
        let pitched = p;
        t.allocated_as("device", 0, pitch as u64 * 10);
        ok(d.sym::<AllocFlags>("cuMemAllocManaged")?(&mut p, 2 << 20, 1), "cuMemAllocManaged")?;
        t.allocated_as("managed", 0, 2 << 20);
        ok(d.sym::<AllocStream>("cuMemAllocAsync")?(&mut p, 3 << 20, null), "cuMemAllocAsync")?;
        t.allocated_as("device", 0, 3 << 20);
        ok(d.sym::<AllocStream>("cuMemAllocAsync_ptsz")?(&mut p, 1 << 20, null), "cuMemAllocAsync_ptsz")?;
        let async_ptsz = p;
        t.allocated_as("device", 0, 1 << 20);
        let mut pool = 0u64;
        let props = [0u8; 88];
        let f: unsafe extern "C" fn(*mut u64, *const u8) -> R = d.sym("cuMemPoolCreate")?;
        ok(f(&mut pool, props.as_ptr()), "cuMemPoolCreate")?;
        ok(d.sym::<AllocPool>("cuMemAllocFromPoolAsync")?(&mut p, 512 << 10, pool, null), "FromPool")?;
        t.allocated_as("device", 0, 512 << 10);
        ok(
            d.sym::<AllocPool>("cuMemAllocFromPoolAsync_ptsz")?(&mut p, 256 << 10, pool, null),
            "FromPool_ptsz",
        )?;
        t.allocated_as("device", 0, 256 << 10);

        // Pinned host memory.
        ok(d.sym::<Alloc>("cuMemAllocHost_v2")?(&mut p, 1 << 20), "cuMemAllocHost_v2")?;
        let host = p;
        t.allocated_as("host", 0, 1 << 20);
        ok(d.sym::<AllocFlags>("cuMemHostAlloc")?(&mut p, 64 << 10, 0), "cuMemHostAlloc")?;
        t.allocated_as("host", 0, 64 << 10);
        let buffer = vec![0u8; 128 << 10];
        let f: unsafe extern "C" fn(*const u8, usize, c_uint) -> R = d.sym("cuMemHostRegister_v2")?;
        ok(f(buffer.as_ptr(), buffer.len(), 0), "cuMemHostRegister_v2")?;
        t.allocated_as("host", 0, buffer.len() as u64);

        // Arrays, sized from their descriptors.
        let f: unsafe extern "C" fn(*mut u64, *const ArrayDesc) -> R = d.sym("cuArrayCreate_v2")?;
        let desc = ArrayDesc { width: 256, height: 256, format: FLOAT, channels: 4 };
        ok(f(&mut p, &desc), "cuArrayCreate_v2")?;
        let array2d = p;
        t.allocated_as("array", 0, 256 * 256 * 16);
        let f: unsafe extern "C" fn(*mut u64, *const Array3DDesc) -> R = d.sym("cuArray3DCreate_v2")?;
        let desc = Array3DDesc { width: 64, height: 64, depth: 16, format: UINT8, channels: 2, flags: 0 };
        ok(f(&mut p, &desc), "cuArray3DCreate_v2")?;
        t.allocated_as("array", 0, 64 * 64 * 16 * 2);
        let f: unsafe extern "C" fn(*mut u64, *const Array3DDesc, c_uint) -> R =
            d.sym("cuMipmappedArrayCreate")?;
        let desc = Array3DDesc { width: 8, height: 8, depth: 0, format: UINT8, channels: 1, flags: 0 };
        ok(f(&mut p, &desc, 4), "cuMipmappedArrayCreate")?;
        let mipmap = p;
        t.allocated_as("array", 0, 64 + 16 + 4 + 1);

        // VMM: 2 MiB on device 1, mapped, released while mapped (stays
        // charged until unmapped); 4 MiB on device 0 released unmapped.
        let create: unsafe extern "C" fn(*mut u64, usize, *const AllocProp, u64) -> R =
            d.sym("cuMemCreate")?;
        let release: Handle1 = d.sym("cuMemRelease")?;
        let prop1 = AllocProp {
            alloc_type: PINNED,
            location_type: LOCATION_DEVICE,
            location_id: 1,
            ..Default::default()
        };
        let mut h1 = 0u64;
        ok(create(&mut h1, 2 << 20, &prop1, 0), "cuMemCreate")?;
        t.allocated_as("vmm", 1, 2 << 20);
        let mut va = 0u64;
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R =
            d.sym("cuMemAddressReserve")?;
        ok(reserve(&mut va, 2 << 20, 0, 0, 0), "cuMemAddressReserve")?;
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R = d.sym("cuMemMap")?;
        ok(map(va, 2 << 20, 0, h1, 0), "cuMemMap")?;
        ok(release(h1), "cuMemRelease (mapped)")?;
        let prop0 = AllocProp {
            alloc_type: PINNED,
            location_type: LOCATION_DEVICE,
            location_id: 0,
            ..Default::default()
        };
        let mut h2 = 0u64;
        ok(create(&mut h2, 4 << 20, &prop0, 0), "cuMemCreate")?;
        t.allocated_as("vmm", 0, 4 << 20);
        ok(release(h2), "cuMemRelease")?;
        t.freed_as("vmm", 0, 4 << 20);

        // A created context on device 1: current while pushed.
        let mut ctx1: *mut c_void = null;
        let f: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint, c_int) -> R =
            d.sym("cuCtxCreate_v4")?;
        ok(f(&mut ctx1, null, 0, 1), "cuCtxCreate_v4")?;
        ok(d.sym::<Alloc>("cuMemAlloc_v2")?(&mut p, 1 << 20), "cuMemAlloc_v2 on device 1")?;
        let on_dev1 = p;
        t.allocated_as("device", 1, 1 << 20);
        d.set_current(ctx0)?;

        // Imports: reported, never charged to the importer.
        let mut ipc = IpcHandle([0; 64]);
        let f: unsafe extern "C" fn(*mut IpcHandle, u64) -> R = d.sym("cuIpcGetMemHandle")?;
        ok(f(&mut ipc, plain), "cuIpcGetMemHandle")?;
        let f: unsafe extern "C" fn(*mut u64, IpcHandle, c_uint) -> R = d.sym("cuIpcOpenMemHandle_v2")?;
        ok(f(&mut p, ipc, 1), "cuIpcOpenMemHandle_v2")?;
        let mut shareable = 0u64;
        let f: unsafe extern "C" fn(*mut u64, u64, u32, u64) -> R = d.sym("cuMemExportToShareableHandle")?;
        ok(f(&mut shareable, h1, 1, 0), "cuMemExportToShareableHandle")?;
        let f: unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> R =
            d.sym("cuMemImportFromShareableHandle")?;
        let mut imported = 0u64;
        ok(f(&mut imported, shareable as *mut c_void, 1), "cuMemImportFromShareableHandle")?;

        checkpoint("all")?;

        let free: Handle1 = d.sym("cuMemFree_v2")?;
        ok(free(plain), "cuMemFree_v2")?;
        t.freed_as("device", 0, 1 << 20);
        ok(free(on_dev1), "cuMemFree_v2 (device 1)")?;
        t.freed_as("device", 1, 1 << 20);
        ok(d.sym::<FreeStream>("cuMemFreeAsync")?(pitched, null), "cuMemFreeAsync")?;
        t.freed_as("device", 0, pitch as u64 * 10);
        ok(d.sym::<FreeStream>("cuMemFreeAsync_ptsz")?(async_ptsz, null), "cuMemFreeAsync_ptsz")?;
        t.freed_as("device", 0, 1 << 20);
        ok(d.sym::<Handle1>("cuMemFreeHost")?(host), "cuMemFreeHost")?;
        t.freed_as("host", 0, 1 << 20);
        ok(d.sym::<Handle1>("cuMemHostUnregister")?(buffer.as_ptr() as u64), "cuMemHostUnregister")?;
        t.freed_as("host", 0, buffer.len() as u64);
        ok(d.sym::<Handle1>("cuArrayDestroy")?(array2d), "cuArrayDestroy")?;
        t.freed_as("array", 0, 256 * 256 * 16);
        ok(d.sym::<Handle1>("cuMipmappedArrayDestroy")?(mipmap), "cuMipmappedArrayDestroy")?;
        t.freed_as("array", 0, 64 + 16 + 4 + 1);
        let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
        ok(unmap(va, 2 << 20), "cuMemUnmap")?;
        t.freed_as("vmm", 1, 2 << 20); // the last unmap of a released handle
        let f: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemPoolTrimTo")?;
        ok(f(pool, 0), "cuMemPoolTrimTo")?;
        let f: unsafe extern "C" fn(*mut c_void) -> R = d.sym("cuCtxDestroy_v2")?;
        ok(f(ctx1), "cuCtxDestroy_v2")?;

        checkpoint("freed")?;
        ok(d.sym::<Handle1>("cuMemPoolDestroy")?(pool), "cuMemPoolDestroy").context("at the end")?;
        drop(buffer);
    }
    // The rest (managed, async, pool, host alloc, 3D array) is left to exit.
    Ok(())
}
