//! Calls reported but never charged: context lifecycle, pool trims and
//! destruction, imports of memory another process allocated (charged to
//! the exporter, never to the importer). Each sends a `call` record at a
//! successful return; the agent names it from the API. A destroyed pool is
//! forgotten (pool.rs).
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_probe_read_user},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{event_type, id, Change, ReportCall, CUDA_SUCCESS};

use crate::{
    account::{pending, usage},
    base::{
        cookie::{self, cookie},
        records::{emit, Subject},
        task_stack::on_task_stack,
    },
    device::current_device,
};

on_task_stack!(
    /// `(handle, size, ...)`: `cuMemPoolTrimTo`, `cuMemPoolDestroy`,
    /// `cuCtxDestroy_v2`, `cuDevicePrimaryCtxRelease[_v2]`.
    uprobe call_entry = CallEntry => call_entry_run
);

#[inline(always)]
fn call_entry_run(ctx: ProbeContext) -> u32 {
    let call = ReportCall {
        out_ptr: 0,
        handle: ctx.arg::<u64>(0).unwrap_or(0),
        size: ctx.arg::<u64>(1).unwrap_or(0),
    };
    pending::put(cookie::api(&ctx), call.into());
    0
}

on_task_stack!(
    /// `(T *out, ...)`: the handle is what the driver writes through the first
    /// argument: `cuIpcOpenMemHandle_v2`, `cuMemImportFromShareableHandle`.
    uprobe call_out_entry = CallOutEntry => call_out_entry_run
);

#[inline(always)]
fn call_out_entry_run(ctx: ProbeContext) -> u32 {
    let call = ReportCall { out_ptr: ctx.arg::<u64>(0).unwrap_or(0), ..ReportCall::default() };
    pending::put(cookie::api(&ctx), call.into());
    0
}

on_task_stack!(uretprobe call_return = CallReturn => call_return_run);

#[inline(always)]
fn call_return_run(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let api = gpumem_common::cookie::api(c);
    let Some(p) = pending::take(api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    if result != CUDA_SUCCESS {
        return 0;
    }
    // SAFETY: the reported calls' entries keep the report variant.
    let call = unsafe { p.call.report };
    let handle = if call.out_ptr != 0 {
        // SAFETY: reads the caller's out-parameter through the helper.
        unsafe { bpf_probe_read_user(call.out_ptr as *const u64) }.unwrap_or(0)
    } else {
        call.handle
    };
    if api == id::MEM_POOL_DESTROY {
        crate::families::pool::forget((bpf_get_current_pid_tgid() >> 32) as u32, handle);
    }
    report(api, gpumem_common::cookie::kind(c), handle, call.size, current_device());
    0
}

/// Sends a record of a reported call (`event_type::CALL`): its handle,
/// size argument and device, with the caller's totals.
#[inline(always)]
pub fn report(api: u32, kind: u32, addr: u64, size: u64, device: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let t = usage::current((pid_tgid >> 32) as u32, cgroup_id);
    let change = Change {
        addr,
        size,
        kind,
        device,
        proc_total: t.proc_total,
        cgroup_total: t.cgroup_total,
        ..Change::default()
    };
    emit(event_type::CALL, api, Subject { pid_tgid, cgroup_id }, change);
}
