//! CUDA arrays: charged the size their descriptor describes (width x
//! height x depth x channel bytes x channels, summed over mipmap levels);
//! the driver's own padding is not visible at the call. They return
//! through `alloc_return` and are freed through `free_return`.
use aya_ebpf::{helpers::bpf_probe_read_user, macros::uprobe, programs::ProbeContext};
use gpumem_common::{array::bytes, stat};

use crate::{
    account::count,
    alloc::pending_alloc,
    exclusive::{exclusive, prog},
};

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Desc2D {
    width: u64,
    height: u64,
    format: u32,
    channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Desc3D {
    width: u64,
    height: u64,
    depth: u64,
    format: u32,
    channels: u32,
    flags: u32,
}

#[inline(always)]
fn start(ctx: &ProbeContext, size: Option<u64>) -> u32 {
    let mut p = pending_alloc(ctx);
    p.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    p.arg = size.unwrap_or_else(|| {
        count(stat::OUT_PTR_UNREADABLE);
        0
    });
    crate::alloc::admit_and_remember(ctx, p, p.arg)
}

/// `cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *desc)`.
#[uprobe]
pub fn array_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::ARRAY_ENTRY, || array_entry_run(ctx))
}

#[inline(always)]
fn array_entry_run(ctx: ProbeContext) -> u32 {
    let desc = ctx.arg::<u64>(1).unwrap_or(0) as *const Desc2D;
    // SAFETY: reads the caller's descriptor through the helper.
    let size = unsafe { bpf_probe_read_user(desc) }
        .ok()
        .map(|d| bytes(d.width, d.height, 1, d.format, d.channels, 1));
    start(&ctx, size)
}

/// `cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *desc)`.
#[uprobe]
pub fn array3d_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::ARRAY3D_ENTRY, || array3d_entry_run(ctx))
}

#[inline(always)]
fn array3d_entry_run(ctx: ProbeContext) -> u32 {
    let desc = ctx.arg::<u64>(1).unwrap_or(0) as *const Desc3D;
    let size = unsafe { bpf_probe_read_user(desc) }
        .ok()
        .map(|d| bytes(d.width, d.height, d.depth, d.format, d.channels, 1));
    start(&ctx, size)
}

/// `cuMipmappedArrayCreate(CUmipmappedArray *out,
/// const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels)`.
#[uprobe]
pub fn mipmap_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::MIPMAP_ENTRY, || mipmap_entry_run(ctx))
}

#[inline(always)]
fn mipmap_entry_run(ctx: ProbeContext) -> u32 {
    let desc = ctx.arg::<u64>(1).unwrap_or(0) as *const Desc3D;
    let levels = ctx.arg::<u64>(2).unwrap_or(1) as u32;
    let size = unsafe { bpf_probe_read_user(desc) }
        .ok()
        .map(|d| bytes(d.width, d.height, d.depth, d.format, d.channels, levels));
    start(&ctx, size)
}
