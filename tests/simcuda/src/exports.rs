//! The library's exported entry points, shaped as NVIDIA ships them (see
//! `../shared/FACTS.md`): each a 24-byte stub that compares the driver's
//! state word with its torn-down mark, returns CUDA_ERROR_DEINITIALIZED (4)
//! if it matches, and otherwise tail-jumps through a slot to the
//! implementation:
//!
//! ```text
//! cmpl $0x321cba00, state(%rip)   # single-stepped by a uprobe here
//! je   1f                          # emulated: where gpumem probes
//! jmp  *slot(%rip)
//! 1: mov $4, %eax
//! ret                              # what deny returns through
//! ```
//!
//! So every test, the demo and the bench run the entry shape the field
//! runs. With the `reference-entries` feature each export is instead a
//! plain `jmp` to its implementation, an entry the kernel emulates at
//! offset 0: the bench's baseline.
//!
//! `cuGetProcAddress` hands out these stubs' addresses, as NVIDIA's does.
#[cfg(not(feature = "reference-entries"))]
use std::sync::atomic::AtomicU32;

/// The driver's state: NVIDIA's stubs refuse every call once it holds
/// [`TORN_DOWN`]. (This library never tears down.)
#[cfg(not(feature = "reference-entries"))]
static STATE: AtomicU32 = AtomicU32::new(0);

/// The state word's torn-down mark, as NVIDIA's stubs compare it.
pub const TORN_DOWN: u32 = 0x321c_ba00;

/// An implementation's address, for a stub to jump through.
#[repr(transparent)]
pub struct Slot(*const ());

// SAFETY: a code address, set at build time and never written.
unsafe impl Sync for Slot {}

macro_rules! exports {
    ($($name:ident => $implementation:path;)*) => {$(
        #[cfg(not(feature = "reference-entries"))]
        #[allow(non_snake_case)]
        mod $name {
            pub static SLOT: super::Slot = super::Slot($implementation as *const ());
        }

        #[cfg(not(feature = "reference-entries"))]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "cmpl ${torn_down}, {state}(%rip)",
                "je 2f",
                "jmp *{slot}(%rip)",
                "2:",
                "mov $4, %eax",
                "ret",
                torn_down = const TORN_DOWN,
                state = sym STATE,
                slot = sym $name::SLOT,
                options(att_syntax),
            )
        }

        #[cfg(feature = "reference-entries")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!("jmp {target}", target = sym $implementation, options(att_syntax))
        }
    )*};
}

exports! {
    cuDeviceTotalMem => crate::device::cuDeviceTotalMem;
    cuMemGetInfo => crate::memory::cuMemGetInfo;
    cuMemPoolGetAccess => crate::pool_attributes::cuMemPoolGetAccess;
    cuMemPoolSetAccess => crate::pool_attributes::cuMemPoolSetAccess;
    cuStreamGetId => crate::streams::cuStreamGetId;
    cuStreamIsCapturing => crate::streams::cuStreamIsCapturing;
    cuMemPoolGetAttribute => crate::pool_attributes::cuMemPoolGetAttribute;
    cuMemPoolSetAttribute => crate::pool_attributes::cuMemPoolSetAttribute;
    cuDeviceGetAttribute => crate::attributes::cuDeviceGetAttribute;
    cuDeviceGetPCIBusId => crate::attributes::cuDeviceGetPCIBusId;
    cuDeviceGetUuid => crate::attributes::cuDeviceGetUuid;
    cuDeviceGetUuid_v2 => crate::attributes::cuDeviceGetUuid_v2;
    cuGetErrorName => crate::errors::cuGetErrorName;
    cuGetErrorString => crate::errors::cuGetErrorString;
    cuMemcpy => crate::copy::cuMemcpy;
    cuMemcpyAsync => crate::copy::cuMemcpyAsync;
    cuMemcpyDtoD_v2 => crate::copy::cuMemcpyDtoD_v2;
    cuMemcpyDtoDAsync_v2 => crate::copy::cuMemcpyDtoDAsync_v2;
    cuMemcpyDtoH_v2 => crate::copy::cuMemcpyDtoH_v2;
    cuMemcpyDtoHAsync_v2 => crate::copy::cuMemcpyDtoHAsync_v2;
    cuMemcpyHtoD_v2 => crate::copy::cuMemcpyHtoD_v2;
    cuMemcpyHtoDAsync_v2 => crate::copy::cuMemcpyHtoDAsync_v2;
    cuMemsetD8_v2 => crate::copy::cuMemsetD8_v2;
    cuMemsetD8Async => crate::copy::cuMemsetD8Async;
    cuMemsetD32_v2 => crate::copy::cuMemsetD32_v2;
    cuMemsetD32Async => crate::copy::cuMemsetD32Async;
    cuStreamCreate => crate::streams::cuStreamCreate;
    cuStreamCreateWithPriority => crate::streams::cuStreamCreateWithPriority;
    cuStreamDestroy_v2 => crate::streams::cuStreamDestroy_v2;
    cuStreamGetPriority => crate::streams::cuStreamGetPriority;
    cuStreamQuery => crate::streams::cuStreamQuery;
    cuStreamSynchronize => crate::streams::cuStreamSynchronize;
    cuStreamWaitEvent => crate::streams::cuStreamWaitEvent;
    cuCtxGetStreamPriorityRange => crate::streams::cuCtxGetStreamPriorityRange;
    cuEventCreate => crate::streams::cuEventCreate;
    cuEventDestroy_v2 => crate::streams::cuEventDestroy_v2;
    cuEventElapsedTime => crate::streams::cuEventElapsedTime;
    cuEventQuery => crate::streams::cuEventQuery;
    cuEventRecord => crate::streams::cuEventRecord;
    cuEventRecordWithFlags => crate::streams::cuEventRecordWithFlags;
    cuEventSynchronize => crate::streams::cuEventSynchronize;
    cuArray3DCreate_v2 => crate::array::cuArray3DCreate_v2;
    cuArrayCreate_v2 => crate::array::cuArrayCreate_v2;
    cuArrayDestroy => crate::array::cuArrayDestroy;
    cuCtxCreate => crate::context::cuCtxCreate;
    cuCtxCreate_v2 => crate::context::cuCtxCreate_v2;
    cuCtxCreate_v3 => crate::context::cuCtxCreate_v3;
    cuCtxCreate_v4 => crate::context::cuCtxCreate_v4;
    cuCtxDestroy_v2 => crate::context::cuCtxDestroy_v2;
    cuCtxGetCurrent => crate::context::cuCtxGetCurrent;
    cuCtxGetDevice => crate::context::cuCtxGetDevice;
    cuCtxPopCurrent_v2 => crate::context::cuCtxPopCurrent_v2;
    cuCtxPushCurrent_v2 => crate::context::cuCtxPushCurrent_v2;
    cuCtxSetCurrent => crate::context::cuCtxSetCurrent;
    cuCtxSynchronize => crate::context::cuCtxSynchronize;
    cuDeviceGet => crate::device::cuDeviceGet;
    cuDeviceGetCount => crate::device::cuDeviceGetCount;
    cuDeviceGetName => crate::device::cuDeviceGetName;
    cuDevicePrimaryCtxRelease => crate::context::cuDevicePrimaryCtxRelease;
    cuDevicePrimaryCtxRelease_v2 => crate::context::cuDevicePrimaryCtxRelease_v2;
    cuDevicePrimaryCtxRetain => crate::context::cuDevicePrimaryCtxRetain;
    cuDeviceTotalMem_v2 => crate::device::cuDeviceTotalMem_v2;
    cuDeviceGetDefaultMemPool => crate::pool::cuDeviceGetDefaultMemPool;
    cuDeviceGetMemPool => crate::pool::cuDeviceGetMemPool;
    cuDeviceSetMemPool => crate::pool::cuDeviceSetMemPool;
    cuDriverGetVersion => crate::device::cuDriverGetVersion;
    cuGetProcAddress_v2 => crate::procaddr::cuGetProcAddress_v2;
    cuInit => crate::device::cuInit;
    cuIpcCloseMemHandle => crate::memory::cuIpcCloseMemHandle;
    cuIpcGetMemHandle => crate::memory::cuIpcGetMemHandle;
    cuIpcOpenMemHandle_v2 => crate::memory::cuIpcOpenMemHandle_v2;
    cuMemAddressFree => crate::vmm::cuMemAddressFree;
    cuMemAddressReserve => crate::vmm::cuMemAddressReserve;
    cuMemAllocAsync => crate::async_alloc::cuMemAllocAsync;
    cuMemAllocAsync_ptsz => crate::async_alloc::cuMemAllocAsync_ptsz;
    cuMemAllocFromPoolAsync => crate::async_alloc::cuMemAllocFromPoolAsync;
    cuMemAllocFromPoolAsync_ptsz => crate::async_alloc::cuMemAllocFromPoolAsync_ptsz;
    cuMemAllocHost_v2 => crate::host::cuMemAllocHost_v2;
    cuMemAllocManaged => crate::memory::cuMemAllocManaged;
    cuMemAllocPitch_v2 => crate::memory::cuMemAllocPitch_v2;
    cuMemAlloc_v2 => crate::memory::cuMemAlloc_v2;
    cuMemCreate => crate::vmm::cuMemCreate;
    cuMemExportToShareableHandle => crate::vmm::cuMemExportToShareableHandle;
    cuMemFreeAsync => crate::async_alloc::cuMemFreeAsync;
    cuMemFreeAsync_ptsz => crate::async_alloc::cuMemFreeAsync_ptsz;
    cuMemFreeHost => crate::host::cuMemFreeHost;
    cuMemFree_v2 => crate::memory::cuMemFree_v2;
    cuMemGetAllocationGranularity => crate::vmm::cuMemGetAllocationGranularity;
    cuMemGetInfo_v2 => crate::memory::cuMemGetInfo_v2;
    cuMemHostAlloc => crate::host::cuMemHostAlloc;
    cuMemHostGetDevicePointer_v2 => crate::host::cuMemHostGetDevicePointer_v2;
    cuMemHostRegister_v2 => crate::host::cuMemHostRegister_v2;
    cuMemHostUnregister => crate::host::cuMemHostUnregister;
    cuMemImportFromShareableHandle => crate::vmm::cuMemImportFromShareableHandle;
    cuMemMap => crate::vmm::cuMemMap;
    cuMemPoolCreate => crate::pool::cuMemPoolCreate;
    cuMemPoolDestroy => crate::pool::cuMemPoolDestroy;
    cuMemPoolTrimTo => crate::pool::cuMemPoolTrimTo;
    cuMemGetMemPool => crate::pool::cuMemGetMemPool;
    cuMemGetDefaultMemPool => crate::pool::cuMemGetDefaultMemPool;
    cuMemRelease => crate::vmm::cuMemRelease;
    cuMemRetainAllocationHandle => crate::vmm::cuMemRetainAllocationHandle;
    cuMemSetAccess => crate::vmm::cuMemSetAccess;
    cuMemUnmap => crate::vmm::cuMemUnmap;
    cuMipmappedArrayCreate => crate::array::cuMipmappedArrayCreate;
    cuMulticastAddDevice => crate::multicast::cuMulticastAddDevice;
    cuMulticastBindAddr => crate::multicast::cuMulticastBindAddr;
    cuMulticastBindMem => crate::multicast::cuMulticastBindMem;
    cuMulticastCreate => crate::multicast::cuMulticastCreate;
    cuMulticastUnbind => crate::multicast::cuMulticastUnbind;
    cuMipmappedArrayDestroy => crate::array::cuMipmappedArrayDestroy;
}
