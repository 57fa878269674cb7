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
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{id, ContextCall, CurrentCall, CUDA_SUCCESS};

use crate::{
    account::pending,
    base::{cookie, task::Task, task_stack::on_task_stack},
    device,
    families::report::report,
};

/// Remembers the out-pointer (argument 0) and the device of a
/// context-making call.
#[inline(always)]
fn ctx_out(ctx: &ProbeContext, device: u64) -> u32 {
    let call = ContextCall { out_ptr: ctx.arg::<u64>(0).unwrap_or(0), device: device as u32 as u64 };
    pending::put(Task::current(), cookie::api(ctx), call.into());
    0
}

on_task_stack!(
    /// `(CUcontext *out, CUdevice dev)`: `cuDevicePrimaryCtxRetain`.
    uprobe ctx_out_dev1_entry = CtxOutDev1Entry => ctx_out_dev1_entry_run
);

#[inline(always)]
fn ctx_out_dev1_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(1).unwrap_or(0))
}

on_task_stack!(
    /// `(CUcontext *out, flags, CUdevice dev)`: `cuCtxCreate`, `_v2`.
    uprobe ctx_out_dev2_entry = CtxOutDev2Entry => ctx_out_dev2_entry_run
);

#[inline(always)]
fn ctx_out_dev2_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(2).unwrap_or(0))
}

on_task_stack!(
    /// `(CUcontext *out, params, flags, CUdevice dev)`: `cuCtxCreate_v4`.
    uprobe ctx_out_dev3_entry = CtxOutDev3Entry => ctx_out_dev3_entry_run
);

#[inline(always)]
fn ctx_out_dev3_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(3).unwrap_or(0))
}

on_task_stack!(
    /// `(CUcontext *out, params, n, flags, CUdevice dev)`: `cuCtxCreate_v3`.
    uprobe ctx_out_dev4_entry = CtxOutDev4Entry => ctx_out_dev4_entry_run
);

#[inline(always)]
fn ctx_out_dev4_entry_run(ctx: ProbeContext) -> u32 {
    ctx_out(&ctx, ctx.arg::<u64>(4).unwrap_or(0))
}

on_task_stack!(uretprobe ctx_out_return = CtxOutReturn => ctx_out_return_run);

#[inline(always)]
fn ctx_out_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let task = Task::current();
    let Some(p) = pending::take(task, api) else { return 0 };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the context-making entries keep the context variant.
    let call = unsafe { p.call.context };
    // SAFETY: reads the caller's out-parameter through the helper.
    let Ok(handle) = (unsafe { bpf_probe_read_user(call.out_ptr as *const u64) }) else {
        return 0;
    };
    device::learn(task, handle, call.device as u32);
    report(task, api, gpumem_common::kind::CONTEXT, handle, 0, call.device as u32);
    if api != id::DEVICE_PRIMARY_CTX_RETAIN {
        // cuCtxCreate makes the new context current on the calling thread.
        device::set_current(task, handle);
    }
    0
}

on_task_stack!(
    /// `(CUcontext ctx)`: becomes current at a successful return.
    uprobe ctx_set_entry = CtxSetEntry => ctx_set_entry_run
);

#[inline(always)]
fn ctx_set_entry_run(ctx: ProbeContext) -> u32 {
    let call = CurrentCall { ctx: ctx.arg::<u64>(0).unwrap_or(0) };
    pending::put(Task::current(), cookie::api(&ctx), call.into());
    0
}

on_task_stack!(uretprobe ctx_set_return = CtxSetReturn => ctx_set_return_run);

#[inline(always)]
fn ctx_set_return_run(ctx: RetProbeContext) -> u32 {
    let task = Task::current();
    let Some(p) = pending::take(task, cookie::api(&ctx)) else {
        return 0;
    };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the set entry keeps the current-context variant.
    device::set_current(task, unsafe { p.call.current.ctx });
    0
}

on_task_stack!(
    /// `cuCtxPopCurrent`: the restored context is not tracked.
    uprobe ctx_pop_entry = CtxPopEntry => ctx_pop_entry_run
);

#[inline(always)]
fn ctx_pop_entry_run(ctx: ProbeContext) -> u32 {
    pending::put(Task::current(), cookie::api(&ctx), CurrentCall::default().into());
    0
}

on_task_stack!(uretprobe ctx_pop_return = CtxPopReturn => ctx_pop_return_run);

#[inline(always)]
fn ctx_pop_return_run(ctx: RetProbeContext) -> u32 {
    let task = Task::current();
    if pending::take(task, cookie::api(&ctx)).is_some() && ctx.ret::<u64>() as u32 == CUDA_SUCCESS {
        device::set_current(task, 0);
    }
    0
}
