//! Records to the agent: a header and the payload of the event kind (see
//! `gpumem_common::record`), reserved in the ring buffer after the change
//! they report.
//!
//! Reserving first would order the stream by the changes (a charge racing
//! its killed group's release can otherwise land behind the `exit`
//! record), but a reservation held across the accounting stalled the whole
//! stream on a 7.2 kernel under QEMU (every later record stuck behind one
//! never seen committed), so it is not done.
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::bpf_ktime_get_ns,
};
use gpumem_common::{stat, Header, Record, WAKEUP_BACKLOG, WAKEUP_GAP_NS, WAKE_IDLE};

use crate::{
    base::{counters::count, task::Task},
    maps::{EVENTS, WAKE_AT},
};

/// Who a record is about: the calling thread (its task, for the comm, and
/// its pid_tgid) and the cgroup.
#[derive(Clone, Copy)]
pub struct Subject {
    pub task: Task,
    pub pid_tgid: u64,
    pub cgroup_id: u64,
}

impl Subject {
    /// The calling thread `task` in cgroup `cgroup_id`.
    #[inline(always)]
    pub fn of(task: Task, cgroup_id: u64) -> Self {
        Self { task, pid_tgid: task.pid_tgid(), cgroup_id }
    }
}

/// Sends a record of `event` (an `event_type`) about `who`'s call to
/// `api`, with `body` as its payload; stamps the time and the calling
/// thread's comm. Counts a drop when the ring buffer is full.
#[inline(always)]
pub fn emit<P: Copy + 'static>(event: u32, api: u32, who: Subject, body: P) {
    emit_flagged(event, api, who, body, false);
}

/// [`emit`], waking the agent at once: for a record it must act on (a
/// process held until it does).
#[inline(always)]
pub fn emit_waking<P: Copy + 'static>(event: u32, api: u32, who: Subject, body: P) {
    emit_flagged(event, api, who, body, true);
}

#[inline(always)]
fn emit_flagged<P: Copy + 'static>(event: u32, api: u32, who: Subject, body: P, wake: bool) {
    match EVENTS.reserve::<Record<P>>(0) {
        Some(mut slot) => {
            let record = slot.as_mut_ptr();
            let header = header(event, api, who);
            let now = header.ts_ns;
            // SAFETY: `record` is the reserved entry; each part written in
            // place (a whole record built on the stack first took 88 bytes
            // of alloc_entry's 512 for each decision record).
            unsafe {
                core::ptr::addr_of_mut!((*record).header).write(header);
                core::ptr::addr_of_mut!((*record).body).write(body);
            }
            slot.submit(if wake { BPF_RB_FORCE_WAKEUP as u64 } else { wakeup(now) });
        }
        None => count(stat::RINGBUF_DROPS),
    }
}

/// A record's header: the time, who, and the calling thread's comm.
#[inline(always)]
fn header(event: u32, api: u32, who: Subject) -> Header {
    Header {
        // SAFETY: plain helper call.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        pid_tgid: who.pid_tgid,
        cgroup_id: who.cgroup_id,
        comm: crate::base::comm::of(who.task),
        event,
        api,
    }
}

/// Waking the agent for every record costs the caller more than the record
/// itself (a declaring exec: +20% with a wakeup each): records are
/// submitted quietly and the agent drains on a short timer, unless a
/// backlog builds up. Then a record wakes it, but not every record while
/// it catches up (each wake-up a self-interrupt: 125 ns a pair in the
/// bench's loop): at most one a CPU every `WAKEUP_GAP_NS` (`now`, the
/// record's time), so that a wake-up the agent missed (it read the ring
/// empty, then cleared its readiness) is followed by another.
///
/// A function of its own: inlined, its three ends were copied into each
/// caller's submit, and the verifier walked `alloc_entry`'s records once
/// for each (18,972 -> 34,658 instructions). Inlined with one end (the
/// flag through the stack) it still was (2026-12: `alloc_entry` 26,956 ->
/// 50,301, `alloc_return` 31,750 -> 51,025, start to ready +80 ms), for
/// 2% of a pair's programs; inlined without a branch (comparisons as
/// arithmetic) it verified as this does and measured no faster.
///
/// The backlog is looked at once a CPU every `WAKEUP_GAP_NS`, not at every
/// record: the time since this CPU last looked is a load from its own
/// `WAKE_AT` (a per-CPU array, whose lookup kernels from 6.10 inline),
/// where the ring's query is a helper call at every record (two a pair).
/// A backlog that builds up just after a look wakes the agent at most
/// `WAKEUP_GAP_NS` later. An idle agent (no drain timer) marks every CPU's
/// `WAKE_AT` with `WAKE_IDLE`: each CPU's first record after the mark
/// wakes it (the mark is a slow-path value, so the fast path is as before).
#[inline(never)]
fn wakeup(now: u64) -> u64 {
    let Some(at) = WAKE_AT.get_ptr_mut(0) else { return BPF_RB_FORCE_WAKEUP as u64 };
    // SAFETY: checked map value pointer, this CPU's own (programs run with
    // migration off; the agent writes it only to mark it idle or clear
    // the mark).
    unsafe {
        let last = *at;
        if now.wrapping_sub(last) < WAKEUP_GAP_NS {
            return BPF_RB_NO_WAKEUP as u64;
        }
        *at = now;
        if last == WAKE_IDLE {
            return BPF_RB_FORCE_WAKEUP as u64;
        }
    }
    if EVENTS.query(BPF_RB_AVAIL_DATA as u64) < u64::from(WAKEUP_BACKLOG) {
        return BPF_RB_NO_WAKEUP as u64;
    }
    BPF_RB_FORCE_WAKEUP as u64
}

/// [`emit`] for a payload too large for the stack (a `declared` record):
/// copied from `body`, in a map, straight into the ring buffer.
#[inline(always)]
pub fn emit_from<P: Copy + 'static>(event: u32, api: u32, who: Subject, body: *const P) {
    let header = header(event, api, who);
    let now = header.ts_ns;
    match EVENTS.reserve::<Record<P>>(0) {
        Some(mut slot) => {
            let record = slot.as_mut_ptr();
            // SAFETY: `record` is the reserved entry; `body` points to a
            // whole `P` in a map value (the caller's promise).
            unsafe {
                core::ptr::addr_of_mut!((*record).header).write(header);
                core::ptr::copy_nonoverlapping(body, core::ptr::addr_of_mut!((*record).body), 1);
            }
            slot.submit(wakeup(now));
        }
        None => count(stat::RINGBUF_DROPS),
    }
}
