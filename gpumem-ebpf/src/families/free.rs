//! Frees whose first argument is the address.
//!
//! `free_entry` (`cuMemFree_v2`, see `gpumem_common::api::Shape::Free`):
//! the free is final at its entry, which takes the allocation out of the
//! live map, uncharges it and records it. There is no return probe.
//!
//! `free_take_entry` and `free_return` (the other frees, which the driver
//! may refuse for live memory: `Shape::FreeAtReturn`): the entry takes the
//! allocation out of the live map, so an address the driver hands to
//! another thread before this return cannot be confused with it; the
//! return uncharges it if the driver succeeded and puts it back if not.
use aya_ebpf::programs::{ProbeContext, RetProbeContext};
use gpumem_common::{
    event_type, ns, Change, FreeCall, LiveAlloc, LiveKey, CUDA_SUCCESS, DEVICE_UNKNOWN, FLAG_AT_ENTRY,
    FLAG_UNTRACKED,
};

use crate::{
    account::{live, pending, usage},
    base::{
        cookie::cookie,
        records::{emit, Subject},
        task::Task,
        task_stack::on_task_stack,
    },
};

on_task_stack!(uprobe free_entry = FreeEntry => free_entry_run);

/// The one API `free_entry` runs for (`cuMemFree_v2`): its cookie holds
/// nothing else, so the program reads none (a helper call a pair).
const FREE: &gpumem_common::api::Api = gpumem_common::api::sole(gpumem_common::api::Shape::Free);

#[inline(always)]
fn free_entry_run(ctx: ProbeContext) -> u32 {
    let (api, kind) = (FREE.id, FREE.kind);
    let addr = ctx.arg::<u64>(0).unwrap_or(0);
    let task = Task::current();
    let pid_tgid = task.pid_tgid();
    let key = live_key_of(pid_tgid, ns::for_kind(kind), addr);
    let change = Change { addr, kind, flags: FLAG_AT_ENTRY, ..Change::default() };
    let mut live = LiveAlloc::default();
    if !(live::take(key, &mut live) && record_free(task, api, change, &live)) {
        record_untracked_free(task, api, task.cgroup_id(), change);
    }
    0
}

on_task_stack!(uprobe free_take_entry = FreeTakeEntry => free_take_entry_run);

#[inline(always)]
fn free_take_entry_run(ctx: ProbeContext) -> u32 {
    let c = cookie(&ctx);
    let addr = ctx.arg::<u64>(0).unwrap_or(0);
    let task = Task::current();
    let call = take_live(task, ns::for_kind(gpumem_common::cookie::kind(c)), addr);
    pending::put(task, gpumem_common::cookie::api(c), call.into());
    0
}

/// The state of a free of `addr` (an address or a handle in `namespace`)
/// by `task`: the allocation, taken out of the live map, when gpumem
/// knows it; else the caller's cgroup, which only an untracked free's
/// record needs (read for every free, it was a helper call of about 20 ns
/// a pool pair).
#[inline(always)]
pub fn take_live(task: Task, namespace: u32, addr: u64) -> FreeCall {
    let mut call = FreeCall { addr, ..FreeCall::default() };
    call.found = u32::from(live::take(live_key_of(task.pid_tgid(), namespace, addr), &mut call.live));
    if call.found == 0 {
        call.cgroup_id = task.cgroup_id();
    }
    call
}

on_task_stack!(uretprobe free_return = FreeReturn => free_return_run);

#[inline(always)]
fn free_return_run(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let (api, kind) = (gpumem_common::cookie::api(c), gpumem_common::cookie::kind(c));
    let task = Task::current();
    let Some(p) = pending::take(task, api) else { return 0 };
    // SAFETY: the free entry keeps the free variant.
    let call = unsafe { p.call.free };
    let result = ctx.ret::<u64>() as u32;
    let pid_tgid = task.pid_tgid();
    let key = live_key_of(pid_tgid, ns::for_kind(kind), call.addr);
    if result != CUDA_SUCCESS {
        // The driver kept the allocation: it is still live and charged.
        if call.found == 1 {
            live::keep(key, &call.live);
        }
        return 0;
    }
    let change = Change { addr: call.addr, result, kind, ..Change::default() };
    if !(call.found == 1 && record_free(task, api, change, &call.live)) {
        record_untracked_free(task, api, caller_cgroup(task, &call), change);
    }
    0
}

/// The caller's cgroup for the record of a free taken at its entry
/// (`take_live`) that turns out untracked at its return: read at the
/// entry when nothing was found there, else (an entry of an earlier image
/// of the process) now, of `task`.
#[inline(always)]
pub fn caller_cgroup(task: Task, call: &FreeCall) -> u64 {
    if call.found == 0 {
        return call.cgroup_id;
    }
    task.cgroup_id()
}

/// Sends a free by `task` of something gpumem never saw allocated
/// (`change` carries address, result and kind): nothing is uncharged.
#[inline(always)]
pub fn record_untracked_free(task: Task, api: u32, cgroup_id: u64, mut change: Change) {
    let t = usage::current(task.tgid(), cgroup_id);
    change.device = DEVICE_UNKNOWN;
    change.flags |= FLAG_UNTRACKED;
    change.proc_total = t.proc_total;
    change.cgroup_total = t.cgroup_total;
    emit(event_type::FREE, api, Subject::of(task, cgroup_id), change);
}

/// Uncharges a live allocation that is gone and sends its free (`change`
/// carries address and result) as the calling thread's (`task`); false
/// (nothing done) when it was charged to an earlier image of the
/// process, released already.
#[inline(always)]
pub fn record_free(task: Task, api: u32, mut change: Change, live: &LiveAlloc) -> bool {
    let Some(t) = usage::uncharge_current(task.tgid(), live) else { return false };
    change.size = live.size;
    change.kind = live.kind;
    change.device = live.device;
    change.generation = live.generation;
    change.proc_total = t.proc_total;
    change.cgroup_total = t.cgroup_total;
    emit(event_type::FREE, api, Subject::of(task, live.cgroup_id), change);
    true
}

/// The live-map key for `addr` in `namespace` of the process of
/// `pid_tgid`.
#[inline(always)]
pub fn live_key_of(pid_tgid: u64, namespace: u32, addr: u64) -> LiveKey {
    LiveKey { tgid: (pid_tgid >> 32) as u32, ns: namespace, addr }
}
