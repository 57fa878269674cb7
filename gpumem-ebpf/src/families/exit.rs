//! Process exit and exec: the process's driver state is gone, so
//! everything it still holds is uncharged from each cgroup it charged, its
//! pools are forgotten (pool.rs), and a record tells the agent to forget it.
//!
//! Exit: when the thread-group leader exits. (A leader that leaves with
//! `pthread_exit` while other threads run on is taken for the process
//! exiting; gpumem cannot tell without the kernel's thread count.) A thread
//! that was returning from a driver call when its group was killed can
//! charge after the leader's release; each later thread exit of the group
//! releases such charges again (one more `exit` record, with what it held).
//! Exec: the new image starts with no CUDA state (the driver's file
//! descriptors are close-on-exec and the address space is replaced).
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
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

/// How long after its leader a thread of a killed group may still exit.
const LATE_THREAD_NS: u64 = 10_000_000_000;

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
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let leader = tgid == pid_tgid as u32;
    if leader {
        let _ = LEADER_GONE.insert(tgid, now, 0);
        forget_image(tgid);
        declare::forget(tgid);
    }
    // A later thread: only the killed group's own threads, which exit right
    // after their leader, not a later process that reused the pid.
    let late = !leader
        && LEADER_GONE.get_ptr(tgid).is_some_and(|gone| {
            // SAFETY: a checked map value pointer.
            now.wrapping_sub(unsafe { *gone }) < LATE_THREAD_NS
        });
    if leader || late {
        // SAFETY: plain helper call.
        let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
        release(pid_tgid, event_type::EXIT, cgroup_id);
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
    release(pid_tgid, event_type::EXEC, cgroup_id);
    declare::at_exec((pid_tgid >> 32) as u32);
    pods::at_exec((pid_tgid >> 32) as u32);
    0
}

/// A forked child process inherits the limits its parent declared
/// (declare.rs).
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn process_fork(ctx: RawTracePointContext) -> i32 {
    if tracepoint_runs() {
        declare::at_fork(&ctx);
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
/// were calls in flight (armed).
#[inline(always)]
fn forget_pending(pid_tgid: u64) -> i32 {
    let mut found = 0;
    let mut api = 1;
    while api <= id::MAX {
        let key = PendingKey { pid_tgid, api, _pad: 0 };
        if let Some(p) = PENDING.get_ptr_mut(key) {
            let armed = if id::reserves(api) {
                pending::abandon((pid_tgid >> 32) as u32, p)
            } else {
                pending::disarm(p)
            };
            let _ = PENDING.remove(key);
            found += i32::from(armed);
        }
        api += 1;
    }
    found
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
    /// - args[0], a process that is gone while the kernel still counts memory
    ///   for it: released, with an `exit` record;
    /// - args[1], a thread (pid_tgid) that is gone while `PENDING` still holds
    ///   calls of it: forgotten, what they reserved under limits given back.
    ///
    /// Either may be 0 (none). Returns how many calls in flight it forgot.
    release_gone => release_gone_run
);

#[inline(always)]
fn release_gone_run(ctx: RawTracePointContext) -> i32 {
    let args = aya_ebpf::EbpfContext::as_ptr(&ctx) as *const u64;
    // SAFETY: args[0] and args[1] of the raw tracepoint context the agent
    // passed in (16 bytes).
    let (tgid, thread) = unsafe { (*args as u32, *args.add(1)) };
    if tgid != 0 {
        forget_image(tgid);
        declare::forget(tgid);
        release(((tgid as u64) << 32) | tgid as u64, event_type::EXIT, 0);
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
    /// mapping in `VMM_MAPPINGS` (vmm.rs `forget_dead_mapping`). Without this
    /// they stay until their key is reused: `LIVE` and `VMM_MAPPINGS` fill
    /// over months, and an allocation kept in `LIVE` keeps every free looking
    /// there. args[0] is the key's tgid and namespace (high half), args[1] its
    /// address. Returns 1 if the entry was forgotten, else 0.
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
    } else {
        live::forget_dead(key, generation)
    };
    i32::from(forgot)
}

/// `cgroup_id`: the record's cgroup (0: the first the process charged).
/// Claims the process, takes what it holds in each cgroup and under each
/// limit and gives it back (held.rs: a charge or free racing this on
/// another CPU changes each byte's count once, before or after), then
/// forgets it.
#[inline(always)]
fn release(pid_tgid: u64, event: u32, cgroup_id: u64) {
    let tgid = (pid_tgid >> 32) as u32;
    let Some(proc) = PROC_USAGE.get_ptr_mut(tgid) else {
        return; // never touched CUDA: the common case, and cheap
    };
    // Of two releases at once (two threads of a killed group exiting on two
    // CPUs, or the agent's release of a gone process), one goes on.
    // SAFETY: checked map value pointer.
    let Some(generation) = held::claim_release(unsafe { core::ptr::addr_of_mut!((*proc).generation) }) else {
        return;
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
    limit_usage::release_process(tgid, proc);
    // SAFETY: checked map value pointer.
    let bytes = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*proc).bytes)) };
    let _ = PROC_USAGE.remove(tgid);
    let cgroup_id = if cgroup_id == 0 { first } else { cgroup_id };
    let release =
        Release { size: bytes, cgroup_total: usage::current(tgid, cgroup_id).cgroup_total, generation };
    emit(event, id::NONE, Subject { task: Task::current(), pid_tgid, cgroup_id }, release);
}
