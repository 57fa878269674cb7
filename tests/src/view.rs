//! What a process asks the driver about the card, as frameworks do before
//! they size themselves (the `view` scenario): free and total memory of
//! each device through every exported form (`cuMemGetInfo_v2` found by
//! dlsym and by `cuGetProcAddress_v2`, the 32-bit `cuMemGetInfo`,
//! `cuDeviceTotalMem_v2` and `cuDeviceTotalMem`, and NVML's
//! `nvmlDeviceGetMemoryInfo` and `_v2`: view_nvml.rs), then what JAX does by
//! default: allocate 75% of the total it was told, in one call, and go on
//! allocating half of what it is told is left. Each step prints the
//! figures it saw ([`Seen`]) before its checkpoint.
use std::ffi::{c_char, c_int, c_void};

use anyhow::bail;
use serde::{Deserialize, Serialize};

use crate::{
    driver::Driver,
    truth::Truth,
    view_nvml::{Nvml, NvmlFigures},
};

type R = c_int;
type InfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> R;
type Info32Fn = unsafe extern "C" fn(*mut u32, *mut u32) -> R;
type TotalFn = unsafe extern "C" fn(*mut usize, c_int) -> R;
type Total32Fn = unsafe extern "C" fn(*mut u32, c_int) -> R;
type GetProcAddressFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> R;

/// One device's figures, each as (free, total) or total.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Figures {
    pub device: i32,
    /// `cuMemGetInfo_v2` through dlsym, with this device's context current.
    pub info: (u64, u64),
    /// The same through `cuGetProcAddress_v2("cuMemGetInfo", 3020, 0)`.
    pub info_proc: (u64, u64),
    /// `cuMemGetInfo`, 32-bit.
    pub info_v1: (u32, u32),
    pub total: u64,
    /// `cuDeviceTotalMem`, 32-bit.
    pub total_v1: u32,
    /// NVML's figures for the device.
    pub nvml: NvmlFigures,
}

/// What one step saw, and the allocation it made after.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Seen {
    pub step: String,
    pub devices: Vec<Figures>,
    /// Bytes the step then asked for on device 0 (0: none) ...
    pub asked: u64,
    /// ... and the driver's answer.
    pub result: i32,
}

/// Device 0's context is current; `others` are devices the process also
/// makes a context on, asked about too. Each step asks, then allocates on
/// device 0 what `ask` makes of device 0's figures: `asked` (nothing),
/// `preallocated` (75% of the total, in one call), `grown` (half of the
/// free figure), `done` (nothing: the figures after).
pub fn run(
    d: &Driver,
    t: &Truth,
    ctx: usize,
    others: &[c_int],
    checkpoint: &dyn Fn(&str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut contexts = vec![(0, ctx)];
    for &dev in others {
        contexts.push((dev, d.open_device(dev)? as usize));
    }
    let nvml = Nvml::open(&d.path, &contexts.iter().map(|&(dev, _)| dev).collect::<Vec<_>>())?;
    let step = |name: &str, ask: fn(&Figures) -> u64| -> anyhow::Result<()> {
        let devices =
            contexts.iter().map(|&(dev, c)| figures(d, &nvml, dev, c)).collect::<anyhow::Result<Vec<_>>>()?;
        d.set_current(ctx)?;
        let asked = ask(&devices[0]);
        let result = match asked {
            0 => 0,
            n => match d.alloc(n as usize) {
                Ok(_) => {
                    t.allocated_as("device", 0, n);
                    0
                }
                Err(e) => {
                    t.refused();
                    e
                }
            },
        };
        println!("{}", serde_json::to_string(&Seen { step: name.into(), devices, asked, result })?);
        checkpoint(name)
    };
    step("asked", |_| 0)?;
    step("preallocated", |f| f.info.1 / 4 * 3)?;
    step("grown", |f| f.info.0 / 2)?;
    step("done", |_| 0)
}

/// Device `dev`'s figures, its context `ctx` made current.
fn figures(d: &Driver, nvml: &Nvml, dev: c_int, ctx: usize) -> anyhow::Result<Figures> {
    d.set_current(ctx)?;
    // SAFETY: each type is its symbol's C signature.
    let (info, info32, total, total32, get_proc) = unsafe {
        (
            d.sym::<InfoFn>("cuMemGetInfo_v2")?,
            d.sym::<Info32Fn>("cuMemGetInfo")?,
            d.sym::<TotalFn>("cuDeviceTotalMem_v2")?,
            d.sym::<Total32Fn>("cuDeviceTotalMem")?,
            d.sym::<GetProcAddressFn>("cuGetProcAddress_v2")?,
        )
    };
    let mut found: *mut c_void = std::ptr::null_mut();
    let mut status = 0;
    // SAFETY: cuGetProcAddress_v2's C signature, pointers to live locals.
    let r = unsafe { get_proc(c"cuMemGetInfo".as_ptr(), &mut found, 3020, 0, &mut status) };
    if r != 0 || found.is_null() {
        bail!("cuGetProcAddress_v2(cuMemGetInfo, 3020) returned {r} (status {status})");
    }
    // SAFETY: what cuGetProcAddress_v2 returned for cuMemGetInfo at 3020
    // is cuMemGetInfo_v2.
    let info_proc: InfoFn = unsafe { std::mem::transmute::<*mut c_void, InfoFn>(found) };
    let (mut a, mut b, mut c, mut e) = (0usize, 0usize, 0usize, 0usize);
    let (mut a32, mut b32, mut t32, mut t) = (0u32, 0u32, 0u32, 0usize);
    // SAFETY: driver entry points with their C signatures, given pointers
    // to live locals.
    let results = unsafe {
        [
            info(&mut a, &mut b),
            info_proc(&mut c, &mut e),
            info32(&mut a32, &mut b32),
            total(&mut t, dev),
            total32(&mut t32, dev),
        ]
    };
    if let Some(r) = results.iter().find(|&&r| r != 0) {
        bail!("a memory query of device {dev} returned CUresult {r}");
    }
    Ok(Figures {
        device: dev,
        info: (a as u64, b as u64),
        info_proc: (c as u64, e as u64),
        info_v1: (a32, b32),
        total: t as u64,
        total_v1: t32,
        nvml: nvml.figures(dev)?,
    })
}
