//! CUDA arrays: charged the size their descriptor describes (width x
//! height x depth x channel bytes x channels, summed over mipmap levels);
//! the driver's own padding is not visible at the call. They enter through
//! `alloc_entry`, return through `alloc_return` and are freed through
//! `free_return`.
use core::ffi::c_void;

use aya_ebpf::{helpers::generated::bpf_probe_read_user, programs::ProbeContext};
use gpumem_common::{
    api::{ids_of, in_mask, Shape},
    array::bytes,
    stat, AllocCall,
};

use crate::base::counters::count;

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

/// An array creation's arguments, read for `alloc_entry` (which admits
/// and remembers the call): the handle is written through argument 0, the
/// size is what the descriptor at argument 1 describes. The three shapes
/// end in one computation of the size (a 2D descriptor read as a 3D one
/// of depth 1, one level unless a mipmap's), walked once by the verifier:
/// - `cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *desc)`;
/// - `cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *desc)`;
/// - `cuMipmappedArrayCreate(CUmipmappedArray *out,
///   const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels)`.
#[inline(always)]
pub fn array_args(ctx: &ProbeContext, api: u32, call: &mut AllocCall) {
    call.out_ptr = ctx.arg::<u64>(0).unwrap_or(0);
    let d = if in_mask(api, ARRAY_2D) {
        let d = descriptor::<Desc2D>(ctx);
        Desc3D {
            width: d.width,
            height: d.height,
            depth: 1,
            format: d.format,
            channels: d.channels,
            flags: 0,
        }
    } else {
        descriptor::<Desc3D>(ctx)
    };
    let levels = if in_mask(api, MIPMAP) { ctx.arg::<u64>(2).unwrap_or(1) as u32 } else { 1 };
    call.size = bytes(d.width, d.height, d.depth, d.format, d.channels, levels);
}

/// The APIs whose descriptor is a `CUDA_ARRAY_DESCRIPTOR`, and those
/// with mipmap levels.
const ARRAY_2D: u64 = ids_of(Shape::Array);
const MIPMAP: u64 = ids_of(Shape::Mipmap);

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
