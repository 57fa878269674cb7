//! Calls reported but never charged: context lifecycle, pool trims and
//! destruction, imports of memory another process allocated (charged to
//! the exporter, never to the importer). Each sends a `call` record at a
//! successful return; the agent names it from the API.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{cookie_api, cookie_kind, event_type, EventRecord, Pending, CUDA_SUCCESS};

use crate::{
    account::{cookie, current, emit, put_pending, take_pending},
    context::current_device,
    exclusive::{exclusive, prog},
};

/// `(handle, size, ...)`: `cuMemPoolTrimTo`, `cuMemPoolDestroy`,
/// `cuCtxDestroy_v2`, `cuDevicePrimaryCtxRelease[_v2]`.
#[uprobe]
pub fn call_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CALL_ENTRY, || call_entry_run(ctx))
}

#[inline(always)]
fn call_entry_run(ctx: ProbeContext) -> u32 {
    let p = Pending {
        addr: ctx.arg::<u64>(0).unwrap_or(0),
        arg: ctx.arg::<u64>(1).unwrap_or(0),
        ..Pending::default()
    };
    put_pending(cookie_api(cookie(&ctx)), &p);
    0
}

/// `(T *out, ...)`: the handle is what the driver writes through the first
/// argument: `cuIpcOpenMemHandle_v2`, `cuMemImportFromShareableHandle`.
#[uprobe]
pub fn call_out_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::CALL_OUT_ENTRY, || call_out_entry_run(ctx))
}

#[inline(always)]
fn call_out_entry_run(ctx: ProbeContext) -> u32 {
    let p = Pending { out_ptr: ctx.arg::<u64>(0).unwrap_or(0), ..Pending::default() };
    put_pending(cookie_api(cookie(&ctx)), &p);
    0
}

#[uretprobe]
pub fn call_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::CALL_RETURN, || call_return_run(ctx))
}

#[inline(always)]
fn call_return_run(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let api = cookie_api(c);
    let Some(p) = take_pending(api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    if result != CUDA_SUCCESS {
        return 0;
    }
    let addr = if p.out_ptr != 0 {
        // SAFETY: reads the caller's out-parameter through the helper.
        unsafe { bpf_probe_read_user(p.out_ptr as *const u64) }.unwrap_or(0)
    } else {
        p.addr
    };
    report(api, cookie_kind(c), addr, p.arg, current_device());
    0
}

/// Sends a `call` record.
#[inline(always)]
pub fn report(api: u32, kind: u32, addr: u64, size: u64, device: u32) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let t = current((pid_tgid >> 32) as u32, cgroup_id);
    emit(EventRecord {
        pid_tgid,
        cgroup_id,
        proc_total: t.proc_total,
        cgroup_total: t.cgroup_total,
        event: event_type::CALL,
        api,
        kind,
        addr,
        size,
        device,
        ..EventRecord::default()
    });
}
