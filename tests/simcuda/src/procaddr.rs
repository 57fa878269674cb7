//! `cuGetProcAddress`: the driver's own symbol resolution, by base name,
//! requested API version and stream flags, as NVIDIA's `cuda-bindings`
//! and the CUDA runtime use it. Set `SIMCUDA_LOG_PROCADDR=1` to see every
//! request on stderr.
use std::{
    ffi::{c_char, c_int, c_void, CStr},
    sync::OnceLock,
};

use crate::{
    cuda::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND, CUDA_SUCCESS},
    exports,
};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CUdriverProcAddressQueryResult`.
const SYMBOL_SUCCESS: c_int = 0;
const SYMBOL_NOT_FOUND: c_int = 1;
const VERSION_NOT_SUFFICIENT: c_int = 2;

/// One base name: its versioned exports (oldest first) and, where the
/// driver has one, the per-thread-default-stream export.
struct Entry {
    name: &'static str,
    versions: Vec<(c_int, usize)>,
    per_thread: Option<usize>,
}

macro_rules! f {
    ($f:expr) => {
        $f as *const () as usize
    };
}

// A data table: one row per symbol.
#[allow(clippy::too_many_lines)]
fn table() -> &'static [Entry] {
    static T: OnceLock<Vec<Entry>> = OnceLock::new();
    T.get_or_init(|| {
        let e = |name, versions: Vec<(c_int, usize)>| Entry { name, versions, per_thread: None };
        let ptsz = |name, version, f: usize, per_thread: usize| Entry {
            name,
            versions: vec![(version, f)],
            per_thread: Some(per_thread),
        };
        vec![
            e("cuInit", vec![(2000, f!(exports::cuInit))]),
            e("cuDriverGetVersion", vec![(2020, f!(exports::cuDriverGetVersion))]),
            e("cuGetProcAddress", vec![(12000, f!(exports::cuGetProcAddress_v2))]),
            e("cuDeviceGet", vec![(2000, f!(exports::cuDeviceGet))]),
            e("cuDeviceGetCount", vec![(2000, f!(exports::cuDeviceGetCount))]),
            e("cuDeviceGetName", vec![(2000, f!(exports::cuDeviceGetName))]),
            e("cuDeviceTotalMem", vec![(3020, f!(exports::cuDeviceTotalMem_v2))]),
            e("cuDevicePrimaryCtxRetain", vec![(7000, f!(exports::cuDevicePrimaryCtxRetain))]),
            e(
                "cuDevicePrimaryCtxRelease",
                vec![
                    (7000, f!(exports::cuDevicePrimaryCtxRelease)),
                    (11000, f!(exports::cuDevicePrimaryCtxRelease_v2)),
                ],
            ),
            e(
                "cuCtxCreate",
                vec![
                    (2000, f!(exports::cuCtxCreate)),
                    (3020, f!(exports::cuCtxCreate_v2)),
                    (11040, f!(exports::cuCtxCreate_v3)),
                    (12050, f!(exports::cuCtxCreate_v4)),
                ],
            ),
            e("cuCtxDestroy", vec![(4000, f!(exports::cuCtxDestroy_v2))]),
            e("cuCtxSetCurrent", vec![(4000, f!(exports::cuCtxSetCurrent))]),
            e("cuCtxGetCurrent", vec![(4000, f!(exports::cuCtxGetCurrent))]),
            e("cuCtxPushCurrent", vec![(4000, f!(exports::cuCtxPushCurrent_v2))]),
            e("cuCtxPopCurrent", vec![(4000, f!(exports::cuCtxPopCurrent_v2))]),
            e("cuCtxGetDevice", vec![(2000, f!(exports::cuCtxGetDevice))]),
            e("cuMemAlloc", vec![(3020, f!(exports::cuMemAlloc_v2))]),
            e("cuMemFree", vec![(3020, f!(exports::cuMemFree_v2))]),
            e("cuMemGetInfo", vec![(3020, f!(exports::cuMemGetInfo_v2))]),
            e("cuMemAllocPitch", vec![(3020, f!(exports::cuMemAllocPitch_v2))]),
            e("cuMemAllocManaged", vec![(6000, f!(exports::cuMemAllocManaged))]),
            ptsz("cuMemAllocAsync", 11020, f!(exports::cuMemAllocAsync), f!(exports::cuMemAllocAsync_ptsz)),
            ptsz(
                "cuMemAllocFromPoolAsync",
                11020,
                f!(exports::cuMemAllocFromPoolAsync),
                f!(exports::cuMemAllocFromPoolAsync_ptsz),
            ),
            ptsz("cuMemFreeAsync", 11020, f!(exports::cuMemFreeAsync), f!(exports::cuMemFreeAsync_ptsz)),
            e("cuMemPoolCreate", vec![(11020, f!(exports::cuMemPoolCreate))]),
            e("cuMemPoolTrimTo", vec![(11020, f!(exports::cuMemPoolTrimTo))]),
            e("cuMemPoolDestroy", vec![(11020, f!(exports::cuMemPoolDestroy))]),
            e("cuMemCreate", vec![(10020, f!(exports::cuMemCreate))]),
            e("cuMemRelease", vec![(10020, f!(exports::cuMemRelease))]),
            e("cuMemAddressReserve", vec![(10020, f!(exports::cuMemAddressReserve))]),
            e("cuMemAddressFree", vec![(10020, f!(exports::cuMemAddressFree))]),
            e("cuMemMap", vec![(10020, f!(exports::cuMemMap))]),
            e("cuMemUnmap", vec![(10020, f!(exports::cuMemUnmap))]),
            e("cuMemExportToShareableHandle", vec![(10020, f!(exports::cuMemExportToShareableHandle))]),
            e("cuMemImportFromShareableHandle", vec![(10020, f!(exports::cuMemImportFromShareableHandle))]),
            e("cuMemAllocHost", vec![(3020, f!(exports::cuMemAllocHost_v2))]),
            e("cuMemHostAlloc", vec![(2020, f!(exports::cuMemHostAlloc))]),
            e("cuMemHostRegister", vec![(6050, f!(exports::cuMemHostRegister_v2))]),
            e("cuMemFreeHost", vec![(2000, f!(exports::cuMemFreeHost))]),
            e("cuMemHostUnregister", vec![(4000, f!(exports::cuMemHostUnregister))]),
            e("cuMemHostGetDevicePointer", vec![(3020, f!(exports::cuMemHostGetDevicePointer_v2))]),
            e("cuArrayCreate", vec![(3020, f!(exports::cuArrayCreate_v2))]),
            e("cuArray3DCreate", vec![(3020, f!(exports::cuArray3DCreate_v2))]),
            e("cuMipmappedArrayCreate", vec![(5000, f!(exports::cuMipmappedArrayCreate))]),
            e("cuArrayDestroy", vec![(2000, f!(exports::cuArrayDestroy))]),
            e("cuMipmappedArrayDestroy", vec![(5000, f!(exports::cuMipmappedArrayDestroy))]),
            e("cuIpcGetMemHandle", vec![(4010, f!(exports::cuIpcGetMemHandle))]),
            e("cuIpcOpenMemHandle", vec![(11000, f!(exports::cuIpcOpenMemHandle_v2))]),
            e("cuIpcCloseMemHandle", vec![(4010, f!(exports::cuIpcCloseMemHandle))]),
        ]
    })
}

/// Resolves `name` at `version` with `flags`: the export's address, or the
/// query result that says why not.
fn resolve(name: &str, version: c_int, flags: u64) -> Result<usize, c_int> {
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
    let (ptr, query) = match found {
        Ok(p) => (p, SYMBOL_SUCCESS),
        Err(q) => (0, q),
    };
    // SAFETY: the caller's out-pointer, valid by the driver API's contract.
    unsafe { *pfn = ptr as *mut c_void };
    if !status.is_null() {
        // SAFETY: the caller's out-pointer, valid by the driver API's contract.
        unsafe { *status = query };
    }
    if ptr == 0 {
        CUDA_ERROR_NOT_FOUND
    } else {
        CUDA_SUCCESS
    }
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
        assert_eq!(resolve("cuMemAlloc", 3020, 0), Ok(f!(exports::cuMemAlloc_v2)));
        assert_eq!(resolve("cuMemAlloc", 13000, 0), Ok(f!(exports::cuMemAlloc_v2)));
        assert_eq!(resolve("cuMemAlloc", 2000, 0), Err(VERSION_NOT_SUFFICIENT));
        assert_eq!(
            resolve("cuDevicePrimaryCtxRelease", 10000, 0),
            Ok(f!(exports::cuDevicePrimaryCtxRelease))
        );
        assert_eq!(
            resolve("cuDevicePrimaryCtxRelease", 12000, 0),
            Ok(f!(exports::cuDevicePrimaryCtxRelease_v2))
        );
        assert_eq!(resolve("cuNoSuchThing", 12000, 0), Err(SYMBOL_NOT_FOUND));
        assert_eq!(resolve("cuMemAllocAsync", 12000, 0), Ok(f!(exports::cuMemAllocAsync)));
        assert_eq!(
            resolve("cuMemAllocAsync", 12000, PER_THREAD_DEFAULT_STREAM),
            Ok(f!(exports::cuMemAllocAsync_ptsz))
        );
        assert_eq!(resolve("cuMemAlloc", 12000, PER_THREAD_DEFAULT_STREAM), Ok(f!(exports::cuMemAlloc_v2)));
    }
}
