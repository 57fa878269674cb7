//! The `families` scenario: one process through every allocation family
//! gpumem covers, with known sizes, on two devices (pools in `pools.rs`).
//! Ground truth is split by memory kind and device, the way gpumem reports
//! it.
use std::ffi::{c_int, c_uint, c_void};

use anyhow::Context;

use crate::{
    driver::{check, Driver},
    multicast, pools,
    truth::Truth,
};

type R = c_int;

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

#[repr(C)]
#[derive(Clone, Copy)]
struct IpcHandle([u8; 64]);

const FLOAT: u32 = 0x20;
const UINT8: u32 = 0x01;

type Alloc = unsafe extern "C" fn(*mut u64, usize) -> R;
type AllocFlags = unsafe extern "C" fn(*mut u64, usize, c_uint) -> R;
type AllocStream = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> R;
type AllocPool = unsafe extern "C" fn(*mut u64, usize, u64, *mut c_void) -> R;
type FreeStream = unsafe extern "C" fn(u64, *mut c_void) -> R;
type Handle1 = unsafe extern "C" fn(u64) -> R;

/// What the scenario allocated and frees later.
#[derive(Default)]
struct Held {
    plain: u64,
    pitched: u64,
    pitch: usize,
    async_ptsz: u64,
    pool: u64,
    host: u64,
    registered: Vec<u8>,
    array2d: u64,
    mipmap: u64,
    /// The VMM handle released while mapped, and where it is mapped.
    mapped: u64,
    va: u64,
    /// A reference `cuMemRetainAllocationHandle` added, released last.
    retained: u64,
    ctx1: usize,
    on_dev1: u64,
}

/// Runs the scenario; `checkpoint` prints (and pauses on) the truth.
pub fn run(
    d: &Driver,
    t: &Truth,
    ctx0: usize,
    checkpoint: &dyn Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut h = Held::default();
    // SAFETY: in every step, each symbol is loaded with the driver's
    // documented signature, and every pointer passed is to a live local or
    // a buffer of the size the call is told.
    unsafe {
        device_memory(d, t, &mut h)?;
        host_memory(d, t, &mut h)?;
        arrays(d, t, &mut h)?;
        vmm(d, t, &mut h)?;
        second_device(d, t, ctx0, &mut h)?;
        let mut in_pools = pools::PoolsHeld::default();
        pools::run(d, t, &mut in_pools)?;
        imports(d, &h)?;
        multicast::run(d, h.retained, h.va, 2 << 20)?;
        checkpoint("all")?;
        free(d, t, &h)?;
        pools::free(d, t, &in_pools)?;
        checkpoint("freed")?;
        check(d.sym::<Handle1>("cuMemPoolDestroy")?(h.pool), "cuMemPoolDestroy").context("at the end")?;
    }
    // The rest (managed, async, pool, host alloc, 3D array) is left to exit.
    Ok(())
}

/// Device memory on device 0: plain, pitched, managed, stream-ordered
/// and from a pool.
unsafe fn device_memory(d: &Driver, t: &Truth, h: &mut Held) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<c_void>();
    let mut p = 0u64;
    // SAFETY: see `run`.
    unsafe {
        check(d.sym::<Alloc>("cuMemAlloc_v2")?(&mut p, 1 << 20), "cuMemAlloc_v2")?;
        h.plain = p;
        t.allocated_as("device", 0, 1 << 20);
        let f: unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> R =
            d.sym("cuMemAllocPitch_v2")?;
        check(f(&mut p, &mut h.pitch, 1000, 10, 4), "cuMemAllocPitch_v2")?;
        h.pitched = p;
        t.allocated_as("device", 0, h.pitch as u64 * 10);
        check(d.sym::<AllocFlags>("cuMemAllocManaged")?(&mut p, 2 << 20, 1), "cuMemAllocManaged")?;
        t.allocated_as("managed", 0, 2 << 20);
        check(d.sym::<AllocStream>("cuMemAllocAsync")?(&mut p, 3 << 20, null), "cuMemAllocAsync")?;
        t.allocated_as("device", 0, 3 << 20);
        check(d.sym::<AllocStream>("cuMemAllocAsync_ptsz")?(&mut p, 1 << 20, null), "cuMemAllocAsync_ptsz")?;
        h.async_ptsz = p;
        t.allocated_as("device", 0, 1 << 20);
        let props = pools::PoolProps::new(pools::PINNED, pools::DEVICE, 0);
        let f: unsafe extern "C" fn(*mut u64, *const pools::PoolProps) -> R = d.sym("cuMemPoolCreate")?;
        check(f(&mut h.pool, &props), "cuMemPoolCreate")?;
        check(d.sym::<AllocPool>("cuMemAllocFromPoolAsync")?(&mut p, 512 << 10, h.pool, null), "FromPool")?;
        t.allocated_as("device", 0, 512 << 10);
        let f = d.sym::<AllocPool>("cuMemAllocFromPoolAsync_ptsz")?;
        check(f(&mut p, 256 << 10, h.pool, null), "FromPool_ptsz")?;
        t.allocated_as("device", 0, 256 << 10);
    }
    Ok(())
}

/// Pinned host memory: allocated, and the caller's own registered.
unsafe fn host_memory(d: &Driver, t: &Truth, h: &mut Held) -> anyhow::Result<()> {
    let mut p = 0u64;
    // SAFETY: see `run`.
    unsafe {
        check(d.sym::<Alloc>("cuMemAllocHost_v2")?(&mut p, 1 << 20), "cuMemAllocHost_v2")?;
        h.host = p;
        t.allocated_as("host", 0, 1 << 20);
        check(d.sym::<AllocFlags>("cuMemHostAlloc")?(&mut p, 64 << 10, 0), "cuMemHostAlloc")?;
        t.allocated_as("host", 0, 64 << 10);
        // Its device address: reported, charges nothing more.
        let mut device_ptr = 0u64;
        let f: unsafe extern "C" fn(*mut u64, u64, c_uint) -> R = d.sym("cuMemHostGetDevicePointer_v2")?;
        check(f(&mut device_ptr, p, 0), "cuMemHostGetDevicePointer_v2")?;
        h.registered = vec![0u8; 128 << 10];
        let f: unsafe extern "C" fn(*const u8, usize, c_uint) -> R = d.sym("cuMemHostRegister_v2")?;
        check(f(h.registered.as_ptr(), h.registered.len(), 0), "cuMemHostRegister_v2")?;
        t.allocated_as("host", 0, h.registered.len() as u64);
    }
    Ok(())
}

/// Arrays, sized from their descriptors.
unsafe fn arrays(d: &Driver, t: &Truth, h: &mut Held) -> anyhow::Result<()> {
    let mut p = 0u64;
    // SAFETY: see `run`.
    unsafe {
        let f: unsafe extern "C" fn(*mut u64, *const ArrayDesc) -> R = d.sym("cuArrayCreate_v2")?;
        let desc = ArrayDesc { width: 256, height: 256, format: FLOAT, channels: 4 };
        check(f(&mut p, &desc), "cuArrayCreate_v2")?;
        h.array2d = p;
        t.allocated_as("array", 0, 256 * 256 * 16);
        let f: unsafe extern "C" fn(*mut u64, *const Array3DDesc) -> R = d.sym("cuArray3DCreate_v2")?;
        let desc = Array3DDesc { width: 64, height: 64, depth: 16, format: UINT8, channels: 2, flags: 0 };
        check(f(&mut p, &desc), "cuArray3DCreate_v2")?;
        t.allocated_as("array", 0, 64 * 64 * 16 * 2);
        let f: unsafe extern "C" fn(*mut u64, *const Array3DDesc, c_uint) -> R =
            d.sym("cuMipmappedArrayCreate")?;
        let desc = Array3DDesc { width: 8, height: 8, depth: 0, format: UINT8, channels: 1, flags: 0 };
        check(f(&mut p, &desc, 4), "cuMipmappedArrayCreate")?;
        h.mipmap = p;
        t.allocated_as("array", 0, 64 + 16 + 4 + 1);
    }
    Ok(())
}

/// VMM: 2 MiB on device 1, mapped, released while mapped (stays charged
/// until unmapped); 4 MiB on device 0 released unmapped; 2 MiB on device 0
/// retained through its mapping, released and unmapped (the retained
/// reference holds it).
unsafe fn vmm(d: &Driver, t: &Truth, h: &mut Held) -> anyhow::Result<()> {
    let on = |device| pools::PoolProps::new(pools::PINNED, pools::DEVICE, device);
    // SAFETY: see `run`.
    unsafe {
        let create: unsafe extern "C" fn(*mut u64, usize, *const pools::PoolProps, u64) -> R =
            d.sym("cuMemCreate")?;
        let release: Handle1 = d.sym("cuMemRelease")?;
        check(create(&mut h.mapped, 2 << 20, &on(1), 0), "cuMemCreate")?;
        t.allocated_as("vmm", 1, 2 << 20);
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> R =
            d.sym("cuMemAddressReserve")?;
        check(reserve(&mut h.va, 2 << 20, 0, 0, 0), "cuMemAddressReserve")?;
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> R = d.sym("cuMemMap")?;
        check(map(h.va, 2 << 20, 0, h.mapped, 0), "cuMemMap")?;
        check(release(h.mapped), "cuMemRelease (mapped)")?;
        let mut h2 = 0u64;
        check(create(&mut h2, 4 << 20, &on(0), 0), "cuMemCreate")?;
        t.allocated_as("vmm", 0, 4 << 20);
        check(release(h2), "cuMemRelease")?;
        t.freed_as("vmm", 0, 4 << 20);
        // Mapped, retained, released and unmapped: the retained reference
        // still holds the memory (until `free` releases it).
        let (mut h3, mut va3) = (0u64, 0u64);
        check(create(&mut h3, 2 << 20, &on(0), 0), "cuMemCreate")?;
        t.allocated_as("vmm", 0, 2 << 20);
        check(reserve(&mut va3, 2 << 20, 0, 0, 0), "cuMemAddressReserve")?;
        check(map(va3, 2 << 20, 0, h3, 0), "cuMemMap")?;
        let retain: unsafe extern "C" fn(*mut u64, u64) -> R = d.sym("cuMemRetainAllocationHandle")?;
        check(retain(&mut h.retained, va3), "cuMemRetainAllocationHandle")?;
        check(release(h3), "cuMemRelease (retained)")?;
        let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
        check(unmap(va3, 2 << 20), "cuMemUnmap (retained)")?;
    }
    Ok(())
}

/// A created context on device 1: current while its allocation is made.
unsafe fn second_device(d: &Driver, t: &Truth, ctx0: usize, h: &mut Held) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<c_void>();
    let mut ctx1: *mut c_void = null;
    // SAFETY: see `run`.
    unsafe {
        let f: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint, c_int) -> R =
            d.sym("cuCtxCreate_v4")?;
        check(f(&mut ctx1, null, 0, 1), "cuCtxCreate_v4")?;
        check(d.sym::<Alloc>("cuMemAlloc_v2")?(&mut h.on_dev1, 1 << 20), "cuMemAlloc_v2 on device 1")?;
    }
    h.ctx1 = ctx1 as usize;
    t.allocated_as("device", 1, 1 << 20);
    d.set_current(ctx0)
}

/// Imports: reported, never charged to the importer.
unsafe fn imports(d: &Driver, h: &Held) -> anyhow::Result<()> {
    let mut ipc = IpcHandle([0; 64]);
    let mut p = 0u64;
    // SAFETY: see `run`.
    unsafe {
        let f: unsafe extern "C" fn(*mut IpcHandle, u64) -> R = d.sym("cuIpcGetMemHandle")?;
        check(f(&mut ipc, h.plain), "cuIpcGetMemHandle")?;
        let f: unsafe extern "C" fn(*mut u64, IpcHandle, c_uint) -> R = d.sym("cuIpcOpenMemHandle_v2")?;
        check(f(&mut p, ipc, 1), "cuIpcOpenMemHandle_v2")?;
        let mut shareable = 0u64;
        let f: unsafe extern "C" fn(*mut u64, u64, u32, u64) -> R = d.sym("cuMemExportToShareableHandle")?;
        check(f(&mut shareable, h.mapped, 1, 0), "cuMemExportToShareableHandle")?;
        let f: unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> R =
            d.sym("cuMemImportFromShareableHandle")?;
        let mut imported = 0u64;
        check(f(&mut imported, shareable as *mut c_void, 1), "cuMemImportFromShareableHandle")?;
    }
    Ok(())
}

/// Frees through every free family; trims the pool, destroys the context.
unsafe fn free(d: &Driver, t: &Truth, h: &Held) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<c_void>();
    // SAFETY: see `run`.
    unsafe {
        let free: Handle1 = d.sym("cuMemFree_v2")?;
        check(free(h.plain), "cuMemFree_v2")?;
        t.freed_as("device", 0, 1 << 20);
        check(free(h.on_dev1), "cuMemFree_v2 (device 1)")?;
        t.freed_as("device", 1, 1 << 20);
        check(d.sym::<FreeStream>("cuMemFreeAsync")?(h.pitched, null), "cuMemFreeAsync")?;
        t.freed_as("device", 0, h.pitch as u64 * 10);
        check(d.sym::<FreeStream>("cuMemFreeAsync_ptsz")?(h.async_ptsz, null), "cuMemFreeAsync_ptsz")?;
        t.freed_as("device", 0, 1 << 20);
        check(d.sym::<Handle1>("cuMemFreeHost")?(h.host), "cuMemFreeHost")?;
        t.freed_as("host", 0, 1 << 20);
        check(d.sym::<Handle1>("cuMemHostUnregister")?(h.registered.as_ptr() as u64), "cuMemHostUnregister")?;
        t.freed_as("host", 0, h.registered.len() as u64);
        check(d.sym::<Handle1>("cuArrayDestroy")?(h.array2d), "cuArrayDestroy")?;
        t.freed_as("array", 0, 256 * 256 * 16);
        check(d.sym::<Handle1>("cuMipmappedArrayDestroy")?(h.mipmap), "cuMipmappedArrayDestroy")?;
        t.freed_as("array", 0, 64 + 16 + 4 + 1);
        let unmap: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemUnmap")?;
        check(unmap(h.va, 2 << 20), "cuMemUnmap")?;
        t.freed_as("vmm", 1, 2 << 20); // the last unmap of a released handle
        check(d.sym::<Handle1>("cuMemRelease")?(h.retained), "cuMemRelease (the retained reference)")?;
        t.freed_as("vmm", 0, 2 << 20);
        let f: unsafe extern "C" fn(u64, usize) -> R = d.sym("cuMemPoolTrimTo")?;
        check(f(h.pool, 0), "cuMemPoolTrimTo")?;
        let f: unsafe extern "C" fn(*mut c_void) -> R = d.sym("cuCtxDestroy_v2")?;
        check(f(h.ctx1 as *mut c_void), "cuCtxDestroy_v2")?;
    }
    Ok(())
}
