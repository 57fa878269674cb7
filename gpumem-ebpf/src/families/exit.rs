//! Process exit and exec: the process's driver state is gone, so
//! everything it still holds is uncharged from each cgroup it charged, its
//! pools are forgotten (pool.rs), and a record tells the agent to forget it.
//!
//! Exit: when the thread-group leader exits. (A leader that leaves with
//! `pthread_exit` while other threads run on is taken for the process
//! exiting; gpumem cannot tell without the kernel's thread count.) A thread
//! that was returning from a driver call when its group was killed can
//! charge after the leader's release: its charge meets the released entry
//! and leaves the cgroup and the limits as they were (held.rs), and the
//! agent takes its record for late. The released entry stays until no
//! thread of the group can be inside a program: deleted, the preallocated
//! map could hand its element to another process's first charge while
//! such a thread still changes it through the pointer its lookup returned
//! (on kernels that preempt there, Debian's from 6.13, that window is
//! milliseconds wide). The agent deletes it once /proc says the group is
//! gone (`release_gone`), and an exec, whose task is the whole group by
//! then, at once.
//! Exec: the new image starts with no CUDA state (the driver's file
//! descriptors are close-on-exec and the address space is replaced).
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, generated::bpf_loop},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use gpumem_common::{event_type, id, ns, LiveKey, PendingKey, Release, PROC_CGROUP_SLOTS};

use super::{declare, pods, vmm};
use crate::{
    account::{held, limit_usage, live, pending, usage},
    base::task::Task,
    base::{
        atomic::sub,
        bounded,
        handover::{forget_mark, tracepoint_runs},
        records::{emit, Subject},
    },
    maps::{CALLERS, CGROUP_USAGE, LEADER_GONE, PENDING, PROC_NVML, PROC_POOLS, PROC_USAGE},
};

/// Raw tracepoints attach by name through the BPF syscall, so they need no
/// tracefs mount (many hosts and containers have none).
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn process_exit(_ctx: RawTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    forget_mark(pid_tgid);
    if !tracepoint_runs() {
        return 0;
    }
    let tgid = (pid_tgid >> 32) as u32;
    if CALLERS.get_ptr(tgid).is_some() || LEADER_GONE.get_ptr(tgid).is_some() {
        let _ = forget_pending(pid_tgid);
    }
    if tgid == pid_tgid as u32 {
        let _ = LEADER_GONE.insert(tgid, 1, 0);
        forget_image(tgid);
        declare::forget(tgid);
        // SAFETY: plain helper call.
        let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
        // Kept: the group's other threads may still be inside programs.
        let _ = release(pid_tgid, event_type::EXIT, cgroup_id, false);
    }
    0
}

/// Runs in the exec'ing task after the new image is in place; by then the
/// whole thread group is this one task.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn process_exec(_ctx: RawTracePointContext) -> i32 {
    if !tracepoint_runs() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    // The tgid lives on in the new image (a reused pid too).
    let _ = LEADER_GONE.remove((pid_tgid >> 32) as u32);
    forget_image((pid_tgid >> 32) as u32);
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    // Deleted: the exec'ing task is the whole group now.
    let _ = release(pid_tgid, event_type::EXEC, cgroup_id, true);
    declare::at_exec((pid_tgid >> 32) as u32);
    pods::at_exec((pid_tgid >> 32) as u32);
    0
}

/// A forked child process inherits the limits its parent declared
/// (declare.rs). Its pid was free, so no thread of a process that had it
/// before is left: a released usage entry under it (kept for that group's
/// last threads, see the module's text, until the agent found it gone)
/// is deleted, for the child's first charge to make its own.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn process_fork(ctx: RawTracePointContext) -> i32 {
    if !tracepoint_runs() {
        return 0;
    }
    if let Some(child) = declare::forked_process(&ctx) {
        usage::forget_released(child);
        declare::at_fork(child);
    }
    0
}

/// Removes what the kernel learned about process `tgid`'s image beside
/// its memory (its pools' places, its NVML handles): the image is gone
/// (exit) or replaced (exec), and its handles and pools with it.
#[inline(always)]
fn forget_image(tgid: u32) {
    let _ = PROC_POOLS.remove(tgid);
    let _ = PROC_NVML.remove(tgid);
}

/// Removes a dying thread's `PENDING` entries, giving back what the calls
/// it was inside (killed before their return) had reserved under limits:
/// no return will commit or roll that back now. Returns how many of them
/// were calls in flight (armed). One API a `bpf_loop` iteration: the
/// verifier walks the callback once, where a loop of its own was walked
/// for each of the 62 ids (`process_exit` 10,208 instructions verified,
/// `release_gone` 12,170, before).
#[inline(always)]
fn forget_pending(pid_tgid: u64) -> i32 {
    let mut dying = Dying { pid_tgid, found: 0 };
    // SAFETY: the callback is a static function, its context this stack
    // struct, which outlives the call.
    unsafe { bpf_loop(id::MAX, forget_one as *mut _, core::ptr::addr_of_mut!(dying).cast(), 0) };
    dying.found
}

/// `forget_pending`'s state, on its stack.
#[repr(C)]
struct Dying {
    pid_tgid: u64,
    found: i32,
}

/// `bpf_loop` callback: the dying thread's call to API `i + 1`.
unsafe extern "C" fn forget_one(i: u64, ctx: *mut core::ffi::c_void) -> i64 {
    let dying = ctx.cast::<Dying>();
    // SAFETY: `ctx` is `forget_pending`'s `Dying` (the verifier checks it
    // as a pointer to that stack).
    let pid_tgid = unsafe { (*dying).pid_tgid };
    let api = i as u32 + 1;
    let key = PendingKey { pid_tgid, api, _pad: 0 };
    if let Some(p) = PENDING.get_ptr_mut(key) {
        let armed =
            if id::reserves(api) { pending::abandon((pid_tgid >> 32) as u32, p) } else { pending::disarm(p) };
        let _ = PENDING.remove(key);
        // SAFETY: as above.
        unsafe { (*dying).found += i32::from(armed) };
    }
    0
}

crate::base::agent_run::agent_run!(
    /// Never attached: the agent runs it (BPF_PROG_TEST_RUN) for what a
    /// skipped run of `process_exit` left behind. From 7.0 a tracepoint's
    /// callbacks run preemptible (under SRCU-fast with migration disabled,
    /// kernel commit a46023d5616e), while `__bpf_trace_run` still keeps one
    /// recursion counter per program per CPU (`prog->active`): a run preempted
    /// on a CPU makes the kernel skip the same program's run for every other
    /// task exiting on that CPU meanwhile (counted in `recursion_misses`,
    /// `dropped.skipped_runs`). No attach type for an exit hook is free of
    /// such a check (fentry's trampolines keep the same counter, kprobes a
    /// per-CPU one the agent's own map syscalls hold), so the agent finds
    /// what each skipped run left and this program finishes it, exactly as
    /// the exit would have:
    /// - args[0], a process that is gone while the kernel still has its
    ///   usage entry, of the image args[2] names (a later process that
    ///   reused the pid is left alone): released, with an `exit` record,
    ///   if its exit's run was skipped, and its entry deleted either way
    ///   (an exit keeps it for the group's last threads, see the module's
    ///   text). Returns 1 if it released the process, else 0;
    /// - args[1], a thread (pid_tgid) that is gone while `PENDING` still holds
    ///   calls of it: forgotten, what they reserved under limits given back.
    ///   Returns how many calls in flight it forgot.
    ///
    /// The agent passes one of the two (the other 0).
    release_gone => release_gone_run
);

#[inline(always)]
fn release_gone_run(ctx: RawTracePointContext) -> i32 {
    let args = aya_ebpf::EbpfContext::as_ptr(&ctx) as *const u64;
    // SAFETY: args[0] to args[2] of the raw tracepoint context the agent
    // passed in (24 bytes).
    let (tgid, thread, generation) = unsafe { (*args as u32, *args.add(1), *args.add(2)) };
    if tgid != 0 {
        if !usage::image_alive(tgid, held::image(generation)) {
            return 0; // released and deleted since, or the pid reused
        }
        forget_image(tgid);
        declare::forget(tgid);
        return i32::from(release(((tgid as u64) << 32) | tgid as u64, event_type::EXIT, 0, true));
    }
    if thread != 0 {
        return forget_pending(thread);
    }
    0
}

crate::base::agent_run::agent_run!(
    /// Never attached: the agent runs it (BPF_PROG_TEST_RUN) for an entry an
    /// exited or exec'd process image left in a hash map, which its exit
    /// cannot find (the kernel releases an image's charges, not its entries):
    /// a VMM handle or an allocation kept in `LIVE`, forgotten if it is still
    /// of the image args[2] names (account/live.rs `forget_dead`), or a
    /// mapping in `VMM_MAPPINGS` (vmm.rs `forget_dead_mapping`), or the
    /// total of a cgroup the agent found removed, if it is 0 (namespace
    /// `ns::CGROUP`, usage.rs `forget_empty_cgroup`). Without this they
    /// stay until their key is reused: `LIVE`, `VMM_MAPPINGS` and
    /// `CGROUP_USAGE` fill over months, and an allocation kept in `LIVE`
    /// keeps every free looking there. args[0] is the key's tgid and
    /// namespace (high half), args[1] its address (the cgroup's id).
    /// Returns 1 if the entry was forgotten, else 0.
    forget_dead => forget_dead_run
);

#[inline(always)]
fn forget_dead_run(ctx: RawTracePointContext) -> i32 {
    let args = aya_ebpf::EbpfContext::as_ptr(&ctx) as *const u64;
    // SAFETY: args[0] to args[2] of the raw tracepoint context the agent
    // passed in (24 bytes).
    let (who, addr, generation) = unsafe { (*args, *args.add(1), *args.add(2)) };
    let key = LiveKey { tgid: who as u32, ns: (who >> 32) as u32, addr };
    let forgot = if key.ns == ns::VMM_MAPPING {
        vmm::forget_dead_mapping(key)
    } else if key.ns == ns::CGROUP {
        usage::forget_empty_cgroup(addr)
    } else {
        live::forget_dead(key, generation)
    };
    i32::from(forgot)
}

/// `cgroup_id`: the record's cgroup (0: the first the process charged).
/// Claims the process, takes what it holds in each cgroup and under each
/// limit and gives it back (held.rs: a charge or free racing this on
/// another CPU changes each byte's count once, before or after); deletes
/// its entry if `delete` (only where no thread of the process can be in a
/// program: see the module's text), released now or before. Whether this
/// call released it.
#[inline(always)]
fn release(pid_tgid: u64, event: u32, cgroup_id: u64, delete: bool) -> bool {
    let tgid = (pid_tgid >> 32) as u32;
    let Some(proc) = PROC_USAGE.get_ptr_mut(tgid) else {
        return false; // never touched CUDA: the common case, and cheap
    };
    // Of two releases at once (an exit and the agent's release of a
    // process it found gone), one goes on.
    // SAFETY: checked map value pointer.
    let Some(generation) = held::claim_release(unsafe { core::ptr::addr_of_mut!((*proc).generation) }) else {
        if delete {
            let _ = PROC_USAGE.remove(tgid);
        }
        return false;
    };
    let mut first = 0;
    let mut i = 0;
    while i < PROC_CGROUP_SLOTS {
        let at = bounded(i, PROC_CGROUP_SLOTS);
        // SAFETY: checked map value pointer; the id is read after the take,
        // so it sees the claim of any charge the take included.
        let taken = held::take(unsafe { core::ptr::addr_of_mut!((*proc).cgroup_bytes[at]) });
        // SAFETY: as above.
        let id = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*proc).cgroup_ids[at])) };
        if i == 0 {
            first = id;
        }
        if id != 0 && taken != 0 {
            if let Some(cg) = CGROUP_USAGE.get_ptr_mut(id) {
                sub(cg, taken);
            }
        }
        i += 1;
    }
    limit_usage::release_process(proc);
    // SAFETY: checked map value pointer.
    let bytes = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*proc).bytes)) };
    if delete {
        let _ = PROC_USAGE.remove(tgid);
    }
    let cgroup_id = if cgroup_id == 0 { first } else { cgroup_id };
    let release =
        Release { size: bytes, cgroup_total: usage::current(tgid, cgroup_id).cgroup_total, generation };
    emit(event, id::NONE, Subject { task: Task::current(), pid_tgid, cgroup_id }, release);
    true
}
