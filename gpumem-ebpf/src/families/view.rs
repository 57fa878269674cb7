//! What a limited process sees: the driver's answers to "how much memory
//! has this card" (`cuMemGetInfo[_v2]`, `cuDeviceTotalMem[_v2]`), rewritten
//! in the caller's memory at the return for a caller under limits with
//! `view=limit` (limits.rs decides the figures): total = min(the driver's,
//! the smallest such limit), free = min(the driver's, the least left under
//! any of them). Over a limit, free is 0 and the call still succeeds.
//!
//! The return program writes user memory (`bpf_probe_write_user`), which a
//! kernel under lockdown refuses to load: the agent then attaches none of
//! these rows, and limited processes see the card as it is.
use aya_ebpf::{
    helpers::{bpf_probe_read_user, bpf_probe_write_user},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{id, stat, ViewCall, CUDA_SUCCESS};

use crate::{
    account::pending,
    base::{cookie, counters::count, log, task_stack::on_task_stack},
    device::current_device,
    limits,
};

on_task_stack!(
    /// `cuMemGetInfo[_v2](*free, *total)`: the current context's device.
    uprobe mem_info_entry = MemInfoEntry => mem_info_entry_run
);

#[inline(always)]
fn mem_info_entry_run(ctx: ProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let call = ViewCall {
        free_ptr: ctx.arg::<u64>(0).unwrap_or(0),
        total_ptr: ctx.arg::<u64>(1).unwrap_or(0),
        device: current_device(),
        width: if api == id::MEM_GET_INFO { 4 } else { 8 },
    };
    pending::put(api, call.into());
    0
}

on_task_stack!(
    /// `cuDeviceTotalMem[_v2](*bytes, CUdevice dev)`.
    uprobe total_mem_entry = TotalMemEntry => total_mem_entry_run
);

#[inline(always)]
fn total_mem_entry_run(ctx: ProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let call = ViewCall {
        free_ptr: 0,
        total_ptr: ctx.arg::<u64>(0).unwrap_or(0),
        device: ctx.arg::<u64>(1).unwrap_or(u64::MAX) as u32,
        width: if api == id::DEVICE_TOTAL_MEM { 4 } else { 8 },
    };
    pending::put(api, call.into());
    0
}

on_task_stack!(uretprobe view_return = ViewReturn => view_return_run);

#[inline(always)]
fn view_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let Some(p) = pending::take(api) else { return 0 };
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the query shapes' entries keep the view variant.
    let call = unsafe { p.call.view };
    let Some((limit, left)) = limits::view(call.device) else { return 0 };
    let mut rewrote = cap(call.total_ptr, call.width, limit);
    if call.free_ptr != 0 {
        rewrote |= cap(call.free_ptr, call.width, left);
    }
    if rewrote {
        count(stat::VIEW_REWRITES);
        log::view(api, call.device, limit, left);
    }
    0
}

/// Lowers the figure of `width` bytes the driver wrote at `at` to `most`;
/// whether it was written.
#[inline(always)]
fn cap(at: u64, width: u32, most: u64) -> bool {
    if width == 4 {
        // SAFETY: reads the caller's out-parameter through the helper.
        let Ok(was) = (unsafe { bpf_probe_read_user(at as *const u32) }) else { return false };
        let now = most.min(u64::from(was)) as u32;
        // SAFETY: the caller's out-parameter the driver just wrote, of this width.
        return now != was && unsafe { bpf_probe_write_user(at as *mut u32, &now) }.is_ok();
    }
    // SAFETY: reads the caller's out-parameter through the helper.
    let Ok(was) = (unsafe { bpf_probe_read_user(at as *const u64) }) else { return false };
    let now = most.min(was);
    // SAFETY: the caller's out-parameter the driver just wrote, of this width.
    now != was && unsafe { bpf_probe_write_user(at as *mut u64, &now) }.is_ok()
}
