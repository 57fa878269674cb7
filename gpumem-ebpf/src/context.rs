//! Contexts: which device each thread's allocations go to.
//!
//! The driver allocates on the device of the calling thread's current
//! context. gpumem learns each context's device when it is made
//! (`cuDevicePrimaryCtxRetain`, `cuCtxCreate*`: one entry program per
//! position of the device argument, since the verifier rejects a computed
//! offset into the registers) and each thread's current context when it is set
//! (`cuCtxSetCurrent`, `cuCtxPushCurrent`, and `cuCtxCreate*`, which makes
//! the new context current). `cuCtxPopCurrent` restores a context gpumem
//! does not track, so the thread's device becomes unknown until it sets
//! one again.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{cookie_api, id, CtxKey, Pending, CUDA_SUCCESS, DEVICE_UNKNOWN};

use crate::{
    account::{cookie, put_pending, take_pending},
    exclusive::{exclusive, prog},
    maps::{CTX_DEVICE, THREAD_CTX},
};

/// The device of the calling thread's current context, if known.
#[inline(always)]
pub fn current_device() -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: values are copied out.
    let Some(ctx) = (unsafe { THREAD_CTX.get(pid_tgid) }).copied() else {
        return DEVICE_UNKNOWN;
    };
    let key = CtxKey { tgid: (pid_tgid >> 32) as u32, _pad: 0, ctx };
    unsafe { CTX_DEVICE.get(key) }.copied().unwrap_or(DEVICE_UNKNOWN)
}

/// Remembers the out-pointer (argument 0) and the device of a
/// context-making call.
#[inline(always)]
fn ctx_out(ctx: &ProbeContext, device: u64) -> u32 {
    let pending =
        Pending { out_ptr: ctx.arg::<u64>(0).unwrap_or(0), arg: device as u32 as u64, ..Pending::default() };
    put_pending(cookie_api(cookie(ctx)), &pending);
    0
}

/// `(CUcontext *out, CUdevice dev)`: `cuDevicePrimaryCtxRetain`.
#[uprobe]
pub fn ctx_out_dev1_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CTX_OUT_DEV1_ENTRY, || ctx_out_dev1_entry_run(ctx))
}

#[inline(always)]
fn ctx_out_dev1_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(1).unwrap_or(0))
}

/// `(CUcontext *out, flags, CUdevice dev)`: `cuCtxCreate`, `_v2`.
#[uprobe]
pub fn ctx_out_dev2_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CTX_OUT_DEV2_ENTRY, || ctx_out_dev2_entry_run(ctx))
}

#[inline(always)]
fn ctx_out_dev2_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(2).unwrap_or(0))
}

/// `(CUcontext *out, params, flags, CUdevice dev)`: `cuCtxCreate_v4`.
#[uprobe]
pub fn ctx_out_dev3_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CTX_OUT_DEV3_ENTRY, || ctx_out_dev3_entry_run(ctx))
}

#[inline(always)]
fn ctx_out_dev3_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(3).unwrap_or(0))
}

/// `(CUcontext *out, params, n, flags, CUdevice dev)`: `cuCtxCreate_v3`.
#[uprobe]
pub fn ctx_out_dev4_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CTX_OUT_DEV4_ENTRY, || ctx_out_dev4_entry_run(ctx))
}

#[inline(always)]
fn ctx_out_dev4_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(4).unwrap_or(0))
}

#[uretprobe]
pub fn ctx_out_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::CTX_OUT_RETURN, || ctx_out_return_run(ctx))
}

#[inline(always)]
fn ctx_out_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie_api(cookie(&ctx));
    let Some(p) = take_pending(api) else { return 0 };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: reads the caller's out-parameter through the helper.
    let Ok(handle) = (unsafe { bpf_probe_read_user(p.out_ptr as *const u64) }) else {
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = CtxKey { tgid: (pid_tgid >> 32) as u32, _pad: 0, ctx: handle };
    let _ = CTX_DEVICE.insert(key, p.arg as u32, 0);
    crate::report::report(api, gpumem_common::kind::CONTEXT, handle, 0, p.arg as u32);
    if api != id::DEVICE_PRIMARY_CTX_RETAIN {
        // cuCtxCreate makes the new context current on the calling thread.
        let _ = THREAD_CTX.insert(pid_tgid, handle, 0);
    }
    0
}

/// `(CUcontext ctx)`: becomes current at a successful return.
#[uprobe]
pub fn ctx_set_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CTX_SET_ENTRY, || ctx_set_entry_run(ctx))
}

#[inline(always)]
fn ctx_set_entry_run(ctx: ProbeContext) -> u32 {
    let pending = Pending { arg: ctx.arg::<u64>(0).unwrap_or(0), ..Pending::default() };
    put_pending(cookie_api(cookie(&ctx)), &pending);
    0
}

#[uretprobe]
pub fn ctx_set_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::CTX_SET_RETURN, || ctx_set_return_run(ctx))
}

#[inline(always)]
fn ctx_set_return_run(ctx: RetProbeContext) -> u32 {
    let Some(p) = take_pending(cookie_api(cookie(&ctx))) else {
        return 0;
    };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if p.arg == 0 {
        let _ = THREAD_CTX.remove(pid_tgid);
    } else {
        let _ = THREAD_CTX.insert(pid_tgid, p.arg, 0);
    }
    0
}

/// `cuCtxPopCurrent`: the restored context is not tracked.
#[uprobe]
pub fn ctx_pop_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CTX_POP_ENTRY, || ctx_pop_entry_run(ctx))
}

#[inline(always)]
fn ctx_pop_entry_run(ctx: ProbeContext) -> u32 {
    put_pending(cookie_api(cookie(&ctx)), &Pending::default());
    0
}

#[uretprobe]
pub fn ctx_pop_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::CTX_POP_RETURN, || ctx_pop_return_run(ctx))
}

#[inline(always)]
fn ctx_pop_return_run(ctx: RetProbeContext) -> u32 {
    if take_pending(cookie_api(cookie(&ctx))).is_some() && ctx.ret::<u64>() as u32 == CUDA_SUCCESS {
        let _ = THREAD_CTX.remove(bpf_get_current_pid_tgid());
    }
    0
}
