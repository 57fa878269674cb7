//! What a limited process sees: the driver's answers to "how much memory
//! has this card" (`cuMemGetInfo[_v2]`, `cuDeviceTotalMem[_v2]`), rewritten
//! in the caller's memory at the return for a caller under limits with
//! `view=limit` (limits.rs decides the figures): total = min(the driver's,
//! the smallest such limit), free = min(the driver's, the least left under
//! any of them). Over a limit, free is 0 and the call still succeeds.
//!
//! NVML's `nvmlDeviceGetMemoryInfo[_v2]` (nvml.rs keeps its call) returns
//! here too: its used figure becomes total - free and its reserved 0.
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
    base::task::Task,
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
    let task = Task::current();
    let call = ViewCall {
        free_ptr: ctx.arg::<u64>(0).unwrap_or(0),
        total_ptr: ctx.arg::<u64>(1).unwrap_or(0),
        device: current_device(task),
        width: if api == id::MEM_GET_INFO { 4 } else { 8 },
        ..ViewCall::default()
    };
    pending::put(task, api, call.into());
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
        ..ViewCall::default()
    };
    pending::put(Task::current(), api, call.into());
    0
}

on_task_stack!(uretprobe view_return = ViewReturn => view_return_run);

#[inline(always)]
fn view_return_run(ctx: RetProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let task = Task::current();
    let Some(p) = pending::take(task, api) else { return 0 };
    // CUDA_SUCCESS and NVML_SUCCESS are both 0.
    if ctx.ret::<u64>() as u32 != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the query shapes' entries keep the view variant.
    let call = unsafe { p.call.view };
    let Some((limit, left)) = limits::view(task, call.device) else { return 0 };
    let Some((total, mut rewrote)) = cap(call.total_ptr, call.width, limit) else { return 0 };
    if call.free_ptr != 0 {
        let Some((free, wrote)) = cap(call.free_ptr, call.width, left) else { return 0 };
        rewrote |= wrote;
        if rewrote && call.used_ptr != 0 {
            // NVML's card of the limit's size: the rest of it is used, and
            // none is reserved for the driver.
            put(call.used_ptr, total.saturating_sub(free));
            if call.reserved_ptr != 0 {
                put(call.reserved_ptr, 0);
            }
        }
    }
    if rewrote {
        count(stat::VIEW_REWRITES);
        log::view(api, call.device, limit, left);
    }
    0
}

/// Lowers the figure of `width` bytes the library wrote at `at` to `most`:
/// the figure now, and whether it was written; None if it could not be
/// read.
#[inline(always)]
fn cap(at: u64, width: u32, most: u64) -> Option<(u64, bool)> {
    if width == 4 {
        // SAFETY: reads the caller's out-parameter through the helper.
        let was = unsafe { bpf_probe_read_user(at as *const u32) }.ok()?;
        let now = most.min(u64::from(was)) as u32;
        // SAFETY: the caller's out-parameter the driver just wrote, of this width.
        let wrote = now != was && unsafe { bpf_probe_write_user(at as *mut u32, &now) }.is_ok();
        return Some((u64::from(if wrote { now } else { was }), wrote));
    }
    // SAFETY: reads the caller's out-parameter through the helper.
    let was = unsafe { bpf_probe_read_user(at as *const u64) }.ok()?;
    let now = most.min(was);
    // SAFETY: the caller's out-parameter the driver just wrote, of this width.
    let wrote = now != was && unsafe { bpf_probe_write_user(at as *mut u64, &now) }.is_ok();
    Some((if wrote { now } else { was }, wrote))
}

/// Writes a 64-bit figure into the caller's structure the library just
/// filled.
#[inline(always)]
fn put(at: u64, value: u64) {
    // SAFETY: a field of the caller's out-structure, 8 bytes wide.
    let _ = unsafe { bpf_probe_write_user(at as *mut u64, &value) };
}
