//! The view scenario's NVML side: what a process that sizes itself from
//! NVML (vLLM, pynvml users) reads, `nvmlDeviceGetMemoryInfo` and `_v2`,
//! through the device handles `nvmlDeviceGetHandleByIndex_v2` gave it
//! once at start, as such clients do.
use std::ffi::{c_int, c_uint, c_void};

use anyhow::{bail, Context};
use libloading::Library;
use serde::{Deserialize, Serialize};

type Ret = c_uint;
type Handle = *mut c_void;

const NAME: &str = "libnvidia-ml.so.1";

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Default)]
struct MemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2`: the struct's size and version 2, as NVML's header
/// builds it.
const MEMORY_V2: c_uint = std::mem::size_of::<MemoryV2>() as c_uint | (2 << 24);

/// One device's figures as NVML gave them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NvmlFigures {
    /// `nvmlDeviceGetMemoryInfo`: (total, free, used).
    pub v1: (u64, u64, u64),
    /// `nvmlDeviceGetMemoryInfo_v2`: (total, reserved, free, used).
    pub v2: (u64, u64, u64, u64),
}

/// NVML, initialised, with the handles of the devices asked about.
pub struct Nvml {
    _lib: Library,
    info: unsafe extern "C" fn(Handle, *mut Memory) -> Ret,
    info_v2: unsafe extern "C" fn(Handle, *mut MemoryV2) -> Ret,
    handles: Vec<(c_int, usize)>,
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1` (from beside `libcuda` where that is a
    /// path, else from the library path), initialises it and asks for the
    /// handle of each of `devices` by index.
    pub fn open(libcuda: &str, devices: &[c_int]) -> anyhow::Result<Self> {
        let path = match libcuda.contains('/') {
            true => std::path::Path::new(libcuda).with_file_name(NAME).display().to_string(),
            false => NAME.to_string(),
        };
        // SAFETY: loading NVML runs its initialisers, as any client's does.
        let lib = unsafe { Library::new(&path) }.with_context(|| format!("dlopen {path}"))?;
        // SAFETY: each type is its symbol's C signature.
        let (init, by_index, info, info_v2) = unsafe {
            (
                *lib.get::<unsafe extern "C" fn() -> Ret>(b"nvmlInit_v2")?,
                *lib.get::<unsafe extern "C" fn(c_uint, *mut Handle) -> Ret>(
                    b"nvmlDeviceGetHandleByIndex_v2",
                )?,
                *lib.get(b"nvmlDeviceGetMemoryInfo")?,
                *lib.get(b"nvmlDeviceGetMemoryInfo_v2")?,
            )
        };
        // SAFETY: NVML's C entry points, pointers to live locals.
        let r = unsafe { init() };
        if r != 0 {
            bail!("nvmlInit_v2 returned {r}");
        }
        let mut handles = Vec::new();
        for &dev in devices {
            let mut h: Handle = std::ptr::null_mut();
            // SAFETY: as above.
            let r = unsafe { by_index(dev as c_uint, &mut h) };
            if r != 0 {
                bail!("nvmlDeviceGetHandleByIndex_v2({dev}) returned {r}");
            }
            handles.push((dev, h as usize));
        }
        Ok(Self { _lib: lib, info, info_v2, handles })
    }

    /// Device `dev`'s figures, by both forms of the query.
    pub fn figures(&self, dev: c_int) -> anyhow::Result<NvmlFigures> {
        let Some(&(_, h)) = self.handles.iter().find(|(d, _)| *d == dev) else {
            bail!("no NVML handle was asked for device {dev}");
        };
        let (mut m, mut m2) = (Memory::default(), MemoryV2 { version: MEMORY_V2, ..MemoryV2::default() });
        // SAFETY: NVML's C entry points with a handle it gave, pointers to
        // live locals.
        let results = unsafe { [(self.info)(h as Handle, &mut m), (self.info_v2)(h as Handle, &mut m2)] };
        if let Some(r) = results.iter().find(|&&r| r != 0) {
            bail!("an NVML memory query of device {dev} returned {r}");
        }
        Ok(NvmlFigures { v1: (m.total, m.free, m.used), v2: (m2.total, m2.reserved, m2.free, m2.used) })
    }
}
