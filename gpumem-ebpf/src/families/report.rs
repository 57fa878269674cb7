//! Calls reported but never charged: context lifecycle, pool trims and
//! destruction, imports of memory another process allocated (charged to
//! the exporter, never to the importer), exports, multicast objects (the
//! memory bound to them is charged at its `cuMemCreate`). Each sends a
//! `call` record at a successful return; the agent names it from the API.
//! A destroyed pool is forgotten (pool.rs).
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{event_type, id, kind, ns, Change, LiveAlloc, LiveKey, ReportCall, CUDA_SUCCESS};

use crate::{
    account::{live, pending, usage},
    base::task::Task,
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
    pending::put(Task::current(), cookie::api(&ctx), call.into());
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
    pending::put(Task::current(), cookie::api(&ctx), call.into());
    0
}

on_task_stack!(
    /// Handle and size where each API has them:
    /// - `cuMulticastCreate(*mc, const CUmulticastObjectProp *prop)`: the
    ///   handle written through the first argument, the prop's size;
    /// - `cuMulticastAddDevice(mc, dev)`: the handle;
    /// - `cuMulticastBindMem(mc, mcOffset, memHandle, memOffset, size, flags)`,
    ///   `cuMulticastBindAddr(mc, mcOffset, memptr, size, flags)`,
    ///   `cuMulticastUnbind(mc, dev, mcOffset, size)`: the multicast handle
    ///   and the size bound or unbound;
    /// - `cuMemExportToShareableHandle(*shareable, handle, type, flags)`,
    ///   `cuIpcGetMemHandle(*ipc, dptr)`: the allocation exported.
    uprobe call_args_entry = CallArgsEntry => call_args_entry_run
);

#[inline(always)]
fn call_args_entry_run(ctx: ProbeContext) -> u32 {
    let api = cookie::api(&ctx);
    let (a0, a1, a3, a4) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1), ctx.arg::<u64>(3), ctx.arg::<u64>(4));
    let mut call = ReportCall { handle: a0.unwrap_or(0), ..ReportCall::default() };
    match api {
        id::MULTICAST_CREATE => {
            call.out_ptr = call.handle;
            let size_at = a1.unwrap_or(0).wrapping_add(MULTICAST_PROP_SIZE);
            // SAFETY: reads the caller's struct through the helper.
            call.size = unsafe { bpf_probe_read_user(size_at as *const u64) }.unwrap_or(0);
        }
        id::MULTICAST_BIND_MEM => call.size = a4.unwrap_or(0),
        id::MULTICAST_BIND_ADDR | id::MULTICAST_UNBIND => call.size = a3.unwrap_or(0),
        id::MEM_EXPORT_TO_SHAREABLE_HANDLE | id::IPC_GET_MEM_HANDLE => call.handle = a1.unwrap_or(0),
        _ => {}
    }
    pending::put(Task::current(), api, call.into());
    0
}

/// `CUmulticastObjectProp`'s `size` (after `unsigned int numDevices`).
const MULTICAST_PROP_SIZE: u64 = 8;

on_task_stack!(uretprobe call_return = CallReturn => call_return_run);

#[inline(always)]
fn call_return_run(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let api = gpumem_common::cookie::api(c);
    let task = Task::current();
    let Some(p) = pending::take(task, api) else { return 0 };
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
    let (mut kind, mut device) = (gpumem_common::cookie::kind(c), current_device(task));
    if api == id::MEM_POOL_DESTROY || api == id::MEM_POOL_TRIM_TO {
        // A pool's calls are reported at its place (a host pool's as host).
        let tgid = task.tgid();
        if let Some(place) = crate::families::pool::place(tgid, handle) {
            (kind, device) = (place.kind, place.device);
        }
        if api == id::MEM_POOL_DESTROY {
            crate::families::pool::forget(tgid, handle);
        }
    }
    if api == id::MULTICAST_CREATE {
        know_multicast(task, handle);
    }
    report(task, api, kind, handle, call.size, device);
    0
}

/// A multicast handle is mapped and released like a VMM handle: in the
/// live map with nothing charged (`api` marks it), its mappings count and
/// its release is reported, not a free (vmm.rs). `task`: the caller.
#[inline(always)]
fn know_multicast(task: Task, handle: u64) {
    let key = LiveKey { tgid: task.tgid(), ns: ns::VMM_HANDLE, addr: handle };
    let live = LiveAlloc {
        kind: kind::VMM,
        api: id::MULTICAST_CREATE,
        device: current_device(task),
        ..LiveAlloc::default()
    };
    live::keep(key, &live);
}

/// Sends a record of a reported call (`event_type::CALL`) by `task`: its
/// handle, size argument and device, with the caller's totals.
#[inline(always)]
pub fn report(task: Task, api: u32, kind: u32, addr: u64, size: u64, device: u32) {
    let pid_tgid = task.pid_tgid();
    let cgroup_id = task.cgroup_id();
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
    emit(event_type::CALL, api, Subject::of(task, cgroup_id), change);
}
