//! `cuGetProcAddress`: the driver's own symbol resolution, by base name,
//! requested API version and stream flags, as NVIDIA's `cuda-bindings`
//! and the CUDA runtime use it. Set `SIMCUDA_LOG_PROCADDR=1` to see every
//! request on stderr.
use std::{
    ffi::{c_char, c_int, c_void, CStr, CString},
    sync::OnceLock,
};

use crate::cuda::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND, CUDA_SUCCESS};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CUdriverProcAddressQueryResult`.
const SYMBOL_SUCCESS: c_int = 0;
const SYMBOL_NOT_FOUND: c_int = 1;
const VERSION_NOT_SUFFICIENT: c_int = 2;

/// One base name: its versioned exports (oldest first) and, where the
/// driver has one, the per-thread-default-stream export, by symbol. The
/// loader gives their addresses (see [`export_address`]), so callers get
/// the exported entry stubs, as from NVIDIA's driver.
struct Entry {
    name: &'static str,
    versions: Vec<(c_int, &'static str)>,
    per_thread: Option<&'static str>,
}

// A data table: one row per symbol.
#[allow(clippy::too_many_lines)]
fn table() -> &'static [Entry] {
    static T: OnceLock<Vec<Entry>> = OnceLock::new();
    T.get_or_init(|| {
        let e = |name, versions: Vec<(c_int, &'static str)>| Entry { name, versions, per_thread: None };
        let ptsz = |name, version, f: &'static str, per_thread: &'static str| Entry {
            name,
            versions: vec![(version, f)],
            per_thread: Some(per_thread),
        };
        vec![
            e("cuInit", vec![(2000, "cuInit")]),
            e("cuDriverGetVersion", vec![(2020, "cuDriverGetVersion")]),
            e("cuGetProcAddress", vec![(12000, "cuGetProcAddress_v2")]),
            e("cuDeviceGet", vec![(2000, "cuDeviceGet")]),
            e("cuDeviceGetCount", vec![(2000, "cuDeviceGetCount")]),
            e("cuDeviceGetName", vec![(2000, "cuDeviceGetName")]),
            e("cuGetErrorName", vec![(6000, "cuGetErrorName")]),
            e("cuGetErrorString", vec![(6000, "cuGetErrorString")]),
            e("cuDeviceGetAttribute", vec![(2000, "cuDeviceGetAttribute")]),
            e("cuDeviceGetUuid", vec![(9020, "cuDeviceGetUuid"), (11040, "cuDeviceGetUuid_v2")]),
            e("cuDeviceGetPCIBusId", vec![(4010, "cuDeviceGetPCIBusId")]),
            e("cuMemcpy", vec![(4000, "cuMemcpy")]),
            e("cuMemcpyAsync", vec![(4000, "cuMemcpyAsync")]),
            e("cuMemcpyHtoD", vec![(3020, "cuMemcpyHtoD_v2")]),
            e("cuMemcpyDtoH", vec![(3020, "cuMemcpyDtoH_v2")]),
            e("cuMemcpyDtoD", vec![(3020, "cuMemcpyDtoD_v2")]),
            e("cuMemcpyHtoDAsync", vec![(3020, "cuMemcpyHtoDAsync_v2")]),
            e("cuMemcpyDtoHAsync", vec![(3020, "cuMemcpyDtoHAsync_v2")]),
            e("cuMemcpyDtoDAsync", vec![(3020, "cuMemcpyDtoDAsync_v2")]),
            e("cuMemsetD8", vec![(3020, "cuMemsetD8_v2")]),
            e("cuMemsetD32", vec![(3020, "cuMemsetD32_v2")]),
            e("cuMemsetD8Async", vec![(3020, "cuMemsetD8Async")]),
            e("cuMemsetD32Async", vec![(3020, "cuMemsetD32Async")]),
            e("cuStreamCreate", vec![(2000, "cuStreamCreate")]),
            e("cuStreamCreateWithPriority", vec![(5050, "cuStreamCreateWithPriority")]),
            e("cuStreamDestroy", vec![(4000, "cuStreamDestroy_v2")]),
            e("cuStreamGetPriority", vec![(5050, "cuStreamGetPriority")]),
            e("cuStreamGetId", vec![(12000, "cuStreamGetId")]),
            e("cuStreamIsCapturing", vec![(10000, "cuStreamIsCapturing")]),
            e("cuStreamQuery", vec![(2000, "cuStreamQuery")]),
            e("cuStreamSynchronize", vec![(2000, "cuStreamSynchronize")]),
            e("cuStreamWaitEvent", vec![(3020, "cuStreamWaitEvent")]),
            e("cuCtxGetStreamPriorityRange", vec![(5050, "cuCtxGetStreamPriorityRange")]),
            e("cuEventCreate", vec![(2000, "cuEventCreate")]),
            e("cuEventDestroy", vec![(4000, "cuEventDestroy_v2")]),
            e("cuEventElapsedTime", vec![(2000, "cuEventElapsedTime")]),
            e("cuEventQuery", vec![(2000, "cuEventQuery")]),
            e("cuEventRecord", vec![(2000, "cuEventRecord")]),
            e("cuEventRecordWithFlags", vec![(11010, "cuEventRecordWithFlags")]),
            e("cuEventSynchronize", vec![(2000, "cuEventSynchronize")]),
            e("cuDeviceTotalMem", vec![(2000, "cuDeviceTotalMem"), (3020, "cuDeviceTotalMem_v2")]),
            e("cuDevicePrimaryCtxRetain", vec![(7000, "cuDevicePrimaryCtxRetain")]),
            e(
                "cuDevicePrimaryCtxRelease",
                vec![(7000, "cuDevicePrimaryCtxRelease"), (11000, "cuDevicePrimaryCtxRelease_v2")],
            ),
            e(
                "cuCtxCreate",
                vec![
                    (2000, "cuCtxCreate"),
                    (3020, "cuCtxCreate_v2"),
                    (11040, "cuCtxCreate_v3"),
                    (12050, "cuCtxCreate_v4"),
                ],
            ),
            e("cuCtxDestroy", vec![(4000, "cuCtxDestroy_v2")]),
            e("cuCtxSetCurrent", vec![(4000, "cuCtxSetCurrent")]),
            e("cuCtxGetCurrent", vec![(4000, "cuCtxGetCurrent")]),
            e("cuCtxPushCurrent", vec![(4000, "cuCtxPushCurrent_v2")]),
            e("cuCtxPopCurrent", vec![(4000, "cuCtxPopCurrent_v2")]),
            e("cuCtxGetDevice", vec![(2000, "cuCtxGetDevice")]),
            e("cuCtxSynchronize", vec![(2000, "cuCtxSynchronize")]),
            e("cuMemAlloc", vec![(3020, "cuMemAlloc_v2")]),
            e("cuMemFree", vec![(3020, "cuMemFree_v2")]),
            e("cuMemGetInfo", vec![(2000, "cuMemGetInfo"), (3020, "cuMemGetInfo_v2")]),
            e("cuMemAllocPitch", vec![(3020, "cuMemAllocPitch_v2")]),
            e("cuMemAllocManaged", vec![(6000, "cuMemAllocManaged")]),
            ptsz("cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"),
            ptsz("cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"),
            ptsz("cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"),
            e("cuMemPoolCreate", vec![(11020, "cuMemPoolCreate")]),
            e("cuMemPoolGetAttribute", vec![(11020, "cuMemPoolGetAttribute")]),
            e("cuMemPoolSetAttribute", vec![(11020, "cuMemPoolSetAttribute")]),
            e("cuMemPoolGetAccess", vec![(11020, "cuMemPoolGetAccess")]),
            e("cuMemPoolSetAccess", vec![(11020, "cuMemPoolSetAccess")]),
            e("cuMemPoolTrimTo", vec![(11020, "cuMemPoolTrimTo")]),
            e("cuMemPoolDestroy", vec![(11020, "cuMemPoolDestroy")]),
            e("cuDeviceGetDefaultMemPool", vec![(11020, "cuDeviceGetDefaultMemPool")]),
            e("cuDeviceGetMemPool", vec![(11020, "cuDeviceGetMemPool")]),
            e("cuDeviceSetMemPool", vec![(11020, "cuDeviceSetMemPool")]),
            e("cuMemGetDefaultMemPool", vec![(13000, "cuMemGetDefaultMemPool")]),
            e("cuMemGetMemPool", vec![(13000, "cuMemGetMemPool")]),
            e("cuMemCreate", vec![(10020, "cuMemCreate")]),
            e("cuMemGetAllocationGranularity", vec![(10020, "cuMemGetAllocationGranularity")]),
            e("cuMemSetAccess", vec![(10020, "cuMemSetAccess")]),
            e("cuMemRelease", vec![(10020, "cuMemRelease")]),
            e("cuMemRetainAllocationHandle", vec![(11000, "cuMemRetainAllocationHandle")]),
            e("cuMemAddressReserve", vec![(10020, "cuMemAddressReserve")]),
            e("cuMemAddressFree", vec![(10020, "cuMemAddressFree")]),
            e("cuMemMap", vec![(10020, "cuMemMap")]),
            e("cuMemUnmap", vec![(10020, "cuMemUnmap")]),
            e("cuMemExportToShareableHandle", vec![(10020, "cuMemExportToShareableHandle")]),
            e("cuMemImportFromShareableHandle", vec![(10020, "cuMemImportFromShareableHandle")]),
            e("cuMemAllocHost", vec![(3020, "cuMemAllocHost_v2")]),
            e("cuMemHostAlloc", vec![(2020, "cuMemHostAlloc")]),
            e("cuMemHostRegister", vec![(6050, "cuMemHostRegister_v2")]),
            e("cuMemFreeHost", vec![(2000, "cuMemFreeHost")]),
            e("cuMemHostUnregister", vec![(4000, "cuMemHostUnregister")]),
            e("cuMemHostGetDevicePointer", vec![(3020, "cuMemHostGetDevicePointer_v2")]),
            e("cuArrayCreate", vec![(3020, "cuArrayCreate_v2")]),
            e("cuArray3DCreate", vec![(3020, "cuArray3DCreate_v2")]),
            e("cuMipmappedArrayCreate", vec![(5000, "cuMipmappedArrayCreate")]),
            e("cuArrayDestroy", vec![(2000, "cuArrayDestroy")]),
            e("cuMipmappedArrayDestroy", vec![(5000, "cuMipmappedArrayDestroy")]),
            e("cuIpcGetMemHandle", vec![(4010, "cuIpcGetMemHandle")]),
            e("cuIpcOpenMemHandle", vec![(11000, "cuIpcOpenMemHandle_v2")]),
            e("cuIpcCloseMemHandle", vec![(4010, "cuIpcCloseMemHandle")]),
            e("cuMulticastCreate", vec![(12010, "cuMulticastCreate")]),
            e("cuMulticastAddDevice", vec![(12010, "cuMulticastAddDevice")]),
            e("cuMulticastBindMem", vec![(12010, "cuMulticastBindMem")]),
            e("cuMulticastBindAddr", vec![(12010, "cuMulticastBindAddr")]),
            e("cuMulticastUnbind", vec![(12010, "cuMulticastUnbind")]),
        ]
    })
}

/// Resolves `name` at `version` with `flags`: the export's symbol, or the
/// query result that says why not.
fn resolve(name: &str, version: c_int, flags: u64) -> Result<&'static str, c_int> {
    let entry = table().iter().find(|e| e.name == name).ok_or(SYMBOL_NOT_FOUND)?;
    if flags & PER_THREAD_DEFAULT_STREAM != 0 {
        if let Some(p) = entry.per_thread {
            return Ok(p);
        }
    }
    entry.versions.iter().rev().find(|(v, _)| *v <= version).map(|(_, p)| *p).ok_or(VERSION_NOT_SUFFICIENT)
}

unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    if symbol.is_null() || pfn.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: a NUL-terminated symbol name, by the driver API's contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
    let found = resolve(&name, version, flags);
    if std::env::var_os("SIMCUDA_LOG_PROCADDR").is_some() {
        eprintln!("simcuda: cuGetProcAddress({name}, {version}, {flags}) -> {found:?}");
    }
    let (ptr, query) = match found.map(export_address) {
        Ok(Some(p)) => (p, SYMBOL_SUCCESS),
        Ok(None) => (std::ptr::null_mut(), SYMBOL_NOT_FOUND),
        Err(q) => (std::ptr::null_mut(), q),
    };
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pfn = ptr };
    if !status.is_null() {
        // SAFETY: the caller's out-pointer, valid by the driver API's contract.
        unsafe { *status = query };
    }
    if ptr.is_null() {
        CUDA_ERROR_NOT_FOUND
    } else {
        CUDA_SUCCESS
    }
}

/// The address of this library's export `symbol`, from the loader: this
/// library's own handle (the file that holds this function, already
/// loaded), looked up and let go.
fn export_address(symbol: &str) -> Option<*mut c_void> {
    let symbol = CString::new(symbol).ok()?;
    // SAFETY: Dl_info is plain data; all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the loader's tables; `info` is live.
    if unsafe { libc::dladdr(export_address as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: RTLD_NOLOAD only takes another reference to this library,
    // loaded already (this code runs in it); dli_fname is the loader's
    // NUL-terminated path.
    let handle = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
    // SAFETY: gives back the reference dlopen took; the caller's own keeps
    // the library loaded.
    unsafe { libc::dlclose(handle) };
    (!p.is_null()).then_some(p)
}

pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CUresult {
    // SAFETY: the caller's pointers, passed on as the driver API received them.
    unsafe { get_proc_address(symbol, pfn, cuda_version, flags, symbol_status) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_names_resolve_by_version() {
        assert_eq!(resolve("cuMemAlloc", 3020, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuMemAlloc", 13000, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuMemAlloc", 2000, 0), Err(VERSION_NOT_SUFFICIENT));
        assert_eq!(resolve("cuDevicePrimaryCtxRelease", 10000, 0), Ok("cuDevicePrimaryCtxRelease"));
        assert_eq!(resolve("cuDevicePrimaryCtxRelease", 12000, 0), Ok("cuDevicePrimaryCtxRelease_v2"));
        assert_eq!(resolve("cuNoSuchThing", 12000, 0), Err(SYMBOL_NOT_FOUND));
        assert_eq!(resolve("cuMemAllocAsync", 12000, 0), Ok("cuMemAllocAsync"));
        assert_eq!(resolve("cuMemAllocAsync", 12000, PER_THREAD_DEFAULT_STREAM), Ok("cuMemAllocAsync_ptsz"));
        assert_eq!(resolve("cuMemAlloc", 12000, PER_THREAD_DEFAULT_STREAM), Ok("cuMemAlloc_v2"));
    }
}
