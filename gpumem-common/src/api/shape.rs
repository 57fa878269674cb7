//! Argument shapes: how the programs read an API's arguments. Each shape
//! is served by one entry program and one return program; the allocating
//! shapes share one entry program (`alloc_entry`), which tells them apart
//! by the API id in its cookie (`super::ids_of`), so the verifier walks
//! the limit check they all end in once instead of once per shape.
use crate::program::Program;

/// Argument shapes. Each is served by one entry program and one return
/// program; every API of a shape reads its arguments at the same places.
/// Fieldless: `as u8` compares them in const code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `(T **out, size_t bytes, ...)`: charged at a successful return.
    Alloc,
    /// `cuMemAllocPitch_v2(out, *pitch, width, rows, elem)`: charged pitch x
    /// rows, as returned.
    Pitch,
    /// `(void *p, size_t bytes, ...)`: the caller's memory, pinned.
    HostRegister,
    /// `cuMemCreate(*handle, size, *prop, flags)`: charged to the location's
    /// device (host locations as host memory).
    VmmCreate,
    /// `cuMemRelease(handle)`: uncharged now, or at the last unmap if still
    /// mapped.
    VmmRelease,
    /// `cuMemMap(va, size, offset, handle, flags)`: counts a mapping.
    VmmMap,
    /// `cuMemUnmap(va, size)`: counts a mapping gone.
    VmmUnmap,
    /// `cuMemRetainAllocationHandle(*handle, addr)`: one more reference to
    /// the handle, which needs a `cuMemRelease` of its own.
    VmmRetain,
    /// Array creation, sized from `CUDA_ARRAY_DESCRIPTOR`.
    Array,
    /// Sized from `CUDA_ARRAY3D_DESCRIPTOR`.
    Array3D,
    /// Sized from `CUDA_ARRAY3D_DESCRIPTOR` over the mipmap levels.
    Mipmap,
    /// `cuMemFree_v2(addr)`: uncharged at its entry, where the free is
    /// final: the driver refuses a free of a live allocation only where
    /// the process's driver state is lost (its exit releases everything)
    /// or it is misused (no current context, during a stream capture), so
    /// it has no return probe (a trap and a program run less per free).
    Free,
    /// `(T addr, ...)`: uncharged at a successful return. Frees the driver
    /// refuses for live memory: `cuMemFreeAsync` on a bad stream,
    /// `cuMemHostUnregister` of memory `cuMemHostAlloc` made (and
    /// `cuMemFreeHost` of registered memory: one namespace), an array
    /// destroy of the other kind of array, or of a mapped one.
    FreeAtReturn,
    /// Reported, never charged: `(handle, size, ...)`.
    Call,
    /// Reported, never charged: `(T *out, ...)`, the handle written through
    /// the first argument.
    CallOut,
    /// Reported, never charged: handle and size at the places each API
    /// has them (multicast objects, exports; see gpumem-ebpf's report.rs).
    CallArgs,
    /// `(CUcontext *out, ..., CUdevice dev)` with `dev` the argument at
    /// 1, 2, 3 or 4: learns the context's device (the verifier rejects a
    /// computed offset into the registers, hence one program per place).
    CtxOut1,
    CtxOut2,
    CtxOut3,
    CtxOut4,
    /// `(CUcontext ctx)`: the thread's current context.
    CtxSet,
    /// `cuCtxPopCurrent`: the thread's device becomes unknown.
    CtxPop,
    /// `cuMemAllocFromPoolAsync(CUdeviceptr *out, size_t bytes, CUmemoryPool
    /// pool, CUstream)`: charged as [`Shape::Alloc`], with the kind and
    /// device of the pool's location where gpumem learned the pool.
    PoolAlloc,
    /// `cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)`:
    /// learns the pool's location from its properties.
    PoolCreate,
    /// `cuMemGetMemPool`/`cuMemGetDefaultMemPool(CUmemoryPool *out,
    /// CUmemLocation *location, CUmemAllocationType type)`: learns the pool
    /// of a location and allocation type.
    PoolOfLocation,
    /// `cuDeviceGetMemPool`/`cuDeviceGetDefaultMemPool(CUmemoryPool *out,
    /// CUdevice dev)`: learns a device's pool.
    PoolOfDevice,
    /// `cuMemGetInfo[_v2](*free, *total)` of the current context's device:
    /// answered with the caller's limits' view (gpumem-ebpf's view.rs).
    MemInfo,
    /// `cuDeviceTotalMem[_v2](*bytes, CUdevice dev)`: likewise.
    TotalMem,
    /// `nvmlDeviceGetHandleByIndex[_v2](index, nvmlDevice_t *out)`: learns
    /// which device a process's NVML handle is.
    NvmlHandle,
    /// `nvmlDeviceGetMemoryInfo[_v2](nvmlDevice_t, nvmlMemory[_v2]_t *)`:
    /// answered with the caller's limits' view, as `MemInfo`.
    NvmlMemInfo,
}

impl Shape {
    /// The programs attached at the entry and at the return (none where
    /// the entry does all).
    pub const fn programs(self) -> (Program, Option<Program>) {
        use Program::*;
        let (entry, ret) = match self {
            Shape::Free => return (FreeEntry, None),
            Shape::Alloc => (AllocEntry, AllocReturn),
            Shape::Pitch | Shape::HostRegister | Shape::VmmCreate => (AllocEntry, AllocReturn),
            Shape::Array | Shape::Array3D | Shape::Mipmap | Shape::PoolAlloc => (AllocEntry, AllocReturn),
            Shape::VmmRelease => (VmmReleaseEntry, VmmReleaseReturn),
            Shape::VmmMap => (VmmMapEntry, VmmMapReturn),
            Shape::VmmUnmap => (VmmUnmapEntry, VmmUnmapReturn),
            Shape::VmmRetain => (CallOutEntry, VmmRetainReturn),
            Shape::FreeAtReturn => (FreeTakeEntry, FreeReturn),
            Shape::Call => (CallEntry, CallReturn),
            Shape::CallOut => (CallOutEntry, CallReturn),
            Shape::CallArgs => (CallArgsEntry, CallReturn),
            Shape::CtxOut1 => (CtxOutDev1Entry, CtxOutReturn),
            Shape::CtxOut2 => (CtxOutDev2Entry, CtxOutReturn),
            Shape::CtxOut3 => (CtxOutDev3Entry, CtxOutReturn),
            Shape::CtxOut4 => (CtxOutDev4Entry, CtxOutReturn),
            Shape::CtxSet => (CtxSetEntry, CtxSetReturn),
            Shape::CtxPop => (CtxPopEntry, CtxPopReturn),
            Shape::PoolCreate => (PoolCreateEntry, PoolLearnReturn),
            Shape::PoolOfLocation => (PoolOfLocationEntry, PoolLearnReturn),
            Shape::PoolOfDevice => (PoolOfDeviceEntry, PoolLearnReturn),
            Shape::MemInfo => (MemInfoEntry, ViewReturn),
            Shape::TotalMem => (TotalMemEntry, ViewReturn),
            Shape::NvmlHandle => (NvmlHandleEntry, NvmlHandleReturn),
            Shape::NvmlMemInfo => (NvmlMemInfoEntry, ViewReturn),
        };
        (entry, Some(ret))
    }

    /// Whether a call of this shape reserves bytes under limits at its
    /// entry: the allocating shapes, which return through `alloc_return`.
    pub const fn reserves(self) -> bool {
        matches!(self.programs().1, Some(Program::AllocReturn))
    }
}
