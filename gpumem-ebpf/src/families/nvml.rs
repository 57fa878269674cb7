//! NVIDIA's management library: `nvmlDeviceGetMemoryInfo[_v2]` answered
//! with the caller's limits' view (the return is view.rs's), the device
//! known by its handle. A handle is an opaque pointer of the process's
//! own: learned at the return of `nvmlDeviceGetHandleByIndex[_v2]` into
//! the process's `PROC_NVML` value (exit.rs removes it), a handle not
//! learned is an unknown device, which only limits on every device apply
//! to.
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    id,
    nvml::{v1, v2, NvmlHandles, NVML_DEVICES, NVML_SUCCESS},
    stat, ContextCall, ViewCall, DEVICE_UNKNOWN,
};

use crate::{
    account::{pending, usage},
    base::task::Task,
    base::{bounded, cookie, counters::count, task_stack::on_task_stack},
    maps::PROC_NVML,
};

on_task_stack!(
    /// `nvmlDeviceGetHandleByIndex[_v2](index, nvmlDevice_t *out)`.
    uprobe nvml_handle_entry = NvmlHandleEntry => nvml_handle_entry_run
);

#[inline(always)]
fn nvml_handle_entry_run(ctx: ProbeContext) -> u32 {
    let index = ctx.arg::<u64>(0).unwrap_or(u64::MAX) as u32;
    let call = ContextCall { out_ptr: ctx.arg::<u64>(1).unwrap_or(0), device: u64::from(index) };
    pending::put(Task::current(), cookie::api(&ctx), call.into());
    0
}

on_task_stack!(uretprobe nvml_handle_return = NvmlHandleReturn => nvml_handle_return_run);

#[inline(always)]
fn nvml_handle_return_run(ctx: RetProbeContext) -> u32 {
    let task = Task::current();
    let Some(p) = pending::take(task, cookie::api(&ctx)) else { return 0 };
    if ctx.ret::<u64>() as u32 != NVML_SUCCESS {
        return 0;
    }
    // SAFETY: the handle shape's entry keeps the context variant.
    let call = unsafe { p.call.context };
    // SAFETY: reads the caller's out-parameter through the helper.
    let Ok(handle) = (unsafe { bpf_probe_read_user(call.out_ptr as *const u64) }) else {
        count(stat::OUT_PTR_UNREADABLE);
        return 0;
    };
    let tgid = task.tgid();
    let index = call.device as usize;
    if index >= NVML_DEVICES {
        return 0;
    }
    if let Some(handles) = usage::get_or_insert(&PROC_NVML, &tgid, &NvmlHandles::default()) {
        // SAFETY: checked map value pointer, the index masked where it is
        // used (6.1 loses a bounds check across a spill); a racing learner
        // of another device writes another slot.
        unsafe { (*handles).handles[bounded(index, NVML_DEVICES)] = handle };
    }
    0
}

on_task_stack!(
    /// `nvmlDeviceGetMemoryInfo[_v2](nvmlDevice_t, nvmlMemory[_v2]_t *)`.
    uprobe nvml_mem_info_entry = NvmlMemInfoEntry => nvml_mem_info_entry_run
);

#[inline(always)]
fn nvml_mem_info_entry_run(ctx: ProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let handle = ctx.arg::<u64>(0).unwrap_or(0);
    let at = ctx.arg::<u64>(1).unwrap_or(0);
    let task = Task::current();
    let tgid = task.tgid();
    // SAFETY: a read of this process's value, written only at learning.
    let device = unsafe { PROC_NVML.get(tgid) }.and_then(|h| h.device(handle)).unwrap_or(DEVICE_UNKNOWN);
    let call = if at == 0 {
        ViewCall::default()
    } else if api == id::NVML_DEVICE_GET_MEMORY_INFO_V2 {
        ViewCall {
            free_ptr: at + v2::FREE,
            total_ptr: at + v2::TOTAL,
            used_ptr: at + v2::USED,
            reserved_ptr: at + v2::RESERVED,
            device,
            width: 8,
        }
    } else {
        ViewCall {
            free_ptr: at + v1::FREE,
            total_ptr: at + v1::TOTAL,
            used_ptr: at + v1::USED,
            reserved_ptr: 0,
            device,
            width: 8,
        }
    };
    pending::put(task, api, call.into());
    0
}
