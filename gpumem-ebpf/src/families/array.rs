//! CUDA arrays: charged the size their descriptor describes (width x
//! height x depth x channel bytes x channels, summed over mipmap levels);
//! the driver's own padding is not visible at the call. They return
//! through `alloc_return` and are freed through `free_return`.
use core::ffi::c_void;

use aya_ebpf::{helpers::generated::bpf_probe_read_user, programs::ProbeContext};
use gpumem_common::{array::bytes, stat};

use crate::{
    base::{counters::count, task_stack::on_task_stack},
    families::alloc::{admit_and_remember, start as start_alloc},
};

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Desc2D {
    width: u64,
    height: u64,
    format: u32,
    channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Desc3D {
    width: u64,
    height: u64,
    depth: u64,
    format: u32,
    channels: u32,
    flags: u32,
}

/// Admits and remembers an array of `size` bytes, its handle written
/// through argument 0.
#[inline(always)]
fn start(ctx: &ProbeContext, size: u64) -> u32 {
    let mut call = start_alloc(ctx);
    call.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    call.size = size;
    admit_and_remember(ctx, call)
}

/// The caller's descriptor at argument 1, all zeros (so size 0) when it
/// cannot be read, which is counted: `d` starts as zeros, and the helper
/// zeroes its destination when it fails. Not matched on the result, so
/// one path goes on, not two, for the verifier to walk through the
/// admission that follows (the array entries' start-up cost halved).
#[inline(always)]
fn descriptor<D: Copy + Default>(ctx: &ProbeContext) -> D {
    let mut d = D::default();
    let src = ctx.arg::<u64>(1).unwrap_or(0) as *const c_void;
    // SAFETY: the helper writes at most `size_of::<D>()` bytes into `d`.
    let ret = unsafe { bpf_probe_read_user((&mut d as *mut D).cast(), size_of::<D>() as u32, src) };
    if ret != 0 {
        count(stat::OUT_PTR_UNREADABLE);
    }
    d
}

on_task_stack!(
    /// `cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *desc)`.
    uprobe array_entry = ArrayEntry => array_entry_run
);

#[inline(always)]
fn array_entry_run(ctx: ProbeContext) -> u32 {
    let d = descriptor::<Desc2D>(&ctx);
    start(&ctx, bytes(d.width, d.height, 1, d.format, d.channels, 1))
}

on_task_stack!(
    /// `cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *desc)`.
    uprobe array3d_entry = Array3dEntry => array3d_entry_run
);

#[inline(always)]
fn array3d_entry_run(ctx: ProbeContext) -> u32 {
    let d = descriptor::<Desc3D>(&ctx);
    start(&ctx, bytes(d.width, d.height, d.depth, d.format, d.channels, 1))
}

on_task_stack!(
    /// `cuMipmappedArrayCreate(CUmipmappedArray *out,
    /// const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels)`.
    uprobe mipmap_entry = MipmapEntry => mipmap_entry_run
);

#[inline(always)]
fn mipmap_entry_run(ctx: ProbeContext) -> u32 {
    let levels = ctx.arg::<u64>(2).unwrap_or(1) as u32;
    let d = descriptor::<Desc3D>(&ctx);
    start(&ctx, bytes(d.width, d.height, d.depth, d.format, d.channels, levels))
}
