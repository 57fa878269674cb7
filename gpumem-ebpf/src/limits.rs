//! The limit decision, made here and nowhere else: at the entry of every
//! charging call, before the driver runs.
//!
//! The limits that apply to the caller are its process's, its comm's, and
//! those of its cgroup and its ancestors (a cgroup limit covers the
//! subtree, as memory.max does); at most `LIMITS_PER_CALL` of them, nearest
//! first. For each, the request is reserved with an atomic fetch-add,
//! which gives the usage that add made: over the hard limit, the
//! reservation is undone and the limit's action applies (audit keeps it).
//! Racing callers are ordered by their adds, each seeing those before it,
//! so together they never pass a limit (at worst one is refused for a
//! reservation that is then undone). The return commits the reservation
//! at the size the driver charged, or rolls it back; frees and exit
//! release it (each byte once, see held.rs).
use aya_ebpf::helpers::{
    bpf_get_current_comm, bpf_get_current_pid_tgid, generated::bpf_get_current_ancestor_cgroup_id,
    generated::bpf_send_signal,
};
use gpumem_common::{
    event_type, limit_action, limit_list, limit_scope, limits_in_force, EventRecord, LimitKey, ProcUsage,
    DEVICE_ANY, LIMITS_PER_CALL, MAX_CGROUP_DEPTH, MAX_LIMITS, PROC_LIMIT_SLOTS,
};

use crate::{
    account::emit,
    atomic::{add_nofetch, compare_exchange, fetch_add},
    held,
    maps::{COMM_LIMITS, LIMITS, LIMITS_IN_FORCE, LIMIT_BASE, LIMIT_INDEX, LIMIT_STATE},
};

/// The outcome of [`admit`].
pub struct Admission {
    /// The limits the request is reserved under (packed, see `LiveAlloc`).
    pub slots: u64,
    /// A limit refused the call: nothing is to be charged.
    pub refused: bool,
    /// ... and the caller is to get `CUDA_ERROR_OUT_OF_MEMORY` (deny).
    pub deny: bool,
}

#[inline(always)]
fn lookup(key: LimitKey) -> Option<u32> {
    unsafe { LIMIT_INDEX.get(key) }.copied()
}

/// The limits that apply to the calling process (see `limit_list`):
/// pushed farthest first, the root cgroup down to the caller's, then its
/// comm, then the process. Only the kinds of target `kinds` names (see
/// `limits_in_force`) are looked up.
#[inline(always)]
fn applicable(tgid: u32, kinds: u32) -> u64 {
    let mut list = 0u64;
    if kinds & limits_in_force::CGROUP != 0 {
        // Below the caller's own cgroup the helper answers 0, and the walk
        // stops there: each call costs ~25 ns, and a caller a few levels
        // deep would otherwise make a dozen for nothing. (Walked to its
        // full count with a flag instead, the verifier processes 6x the
        // instructions; with the `break`, 1.4x.)
        let mut level = 0;
        while level <= MAX_CGROUP_DEPTH as i32 {
            // SAFETY: plain helper call.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(level) };
            if id == 0 {
                break;
            }
            list = limit_list::push(list, lookup(LimitKey { scope: limit_scope::CGROUP, _pad: 0, id }));
            level += 1;
        }
    }
    if kinds & limits_in_force::COMM != 0 {
        let comm = bpf_get_current_comm().unwrap_or([0; 16]);
        list = limit_list::push(list, unsafe { COMM_LIMITS.get(comm) }.copied());
    }
    if kinds & limits_in_force::PROCESS != 0 {
        list = limit_list::push(
            list,
            lookup(LimitKey { scope: limit_scope::PROCESS, _pad: 0, id: tgid as u64 }),
        );
    }
    limit_list::nearest(list)
}

/// Reserves `size` bytes on `device` under every limit of the caller, or
/// refuses the call (and acts) at the first limit it would cross.
/// `can_deny`: this call can be made to fail (see `deny.rs`); where it
/// cannot, a deny limit only records, as audit does.
#[inline(always)]
pub fn admit(size: u64, device: u32, api: u32, can_deny: bool) -> Admission {
    let kinds = LIMITS_IN_FORCE.get(0).copied().unwrap_or(0);
    if kinds == 0 {
        return Admission { slots: 0, refused: false, deny: false };
    }
    let candidates = applicable((bpf_get_current_pid_tgid() >> 32) as u32, kinds);
    let mut reserved = 0u64;
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        let Some(slot) = limit_list::at(candidates, i) else { break };
        i += 1;
        let (Some(rule), Some(state)) = (LIMITS.get_ptr(slot), LIMIT_STATE.get_ptr_mut(slot)) else {
            continue;
        };
        // SAFETY: checked map value pointer; fields read once.
        let r = unsafe { core::ptr::read_volatile(rule) };
        if r.active == 0 || (r.device != DEVICE_ANY && r.device != device) {
            continue;
        }
        let usage = unsafe { core::ptr::addr_of_mut!((*state).usage) };
        let base = LIMIT_BASE.get(slot).copied().unwrap_or(0);
        let after = unsafe { fetch_add(usage, size) }.wrapping_add(size).wrapping_add(base);
        if after > r.hard {
            report(event_type::LIMIT, slot, size, after - size, r.hard, api, r.action, r.signal);
            let deny = r.action == limit_action::DENY && can_deny;
            if r.action == limit_action::SIGNAL || deny {
                unsafe { add_nofetch(usage, size.wrapping_neg()) };
                release(reserved, size);
                if r.action == limit_action::SIGNAL {
                    // SAFETY: plain helper call; the caller is the current task.
                    unsafe { bpf_send_signal(r.signal) };
                }
                return Admission { slots: 0, refused: true, deny };
            }
        }
        if r.soft != 0 && after > r.soft {
            let flag = unsafe { core::ptr::addr_of_mut!((*state).soft_over) };
            if unsafe { compare_exchange(flag, 0, 1) } == 0 {
                report(event_type::LIMIT_SOFT, slot, size, after - size, r.soft, api, r.action, 0);
            }
        }
        reserved |= ((slot + 1) as u64) << (8 * (i - 1));
    }
    Admission { slots: reserved, refused: false, deny: false }
}

/// A call whose return will never run (its thread was killed inside it,
/// or the kernel skipped the return's run and the thread calls again):
/// gives back what its entry reserved under limits. `p` is the call's
/// `PENDING` entry, armed or not (a returned call reserves nothing more).
#[inline(always)]
pub fn abandon(p: *const gpumem_common::Pending) {
    // SAFETY: checked map value pointer; fields read once.
    let (armed, slots, reserved) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!((*p).armed)),
            core::ptr::read_volatile(core::ptr::addr_of!((*p).live.limit_slots)),
            core::ptr::read_volatile(core::ptr::addr_of!((*p).reserved)),
        )
    };
    if armed == 1 {
        release(slots, reserved);
    }
}

/// Adds `delta` (wrapping: may be negative) to every limit in `slots`;
/// re-arms soft-limit records when usage falls back under them.
#[inline(always)]
pub fn adjust(slots: u64, delta: u64) {
    if slots == 0 || delta == 0 {
        return;
    }
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        let slot = limit_list::at(slots, i);
        if let (Some(rule), Some(state)) =
            (slot.and_then(|s| LIMITS.get_ptr(s)), slot.and_then(|s| LIMIT_STATE.get_ptr_mut(s)))
        {
            // SAFETY: checked map value pointers.
            let usage = unsafe { core::ptr::addr_of_mut!((*state).usage) };
            unsafe { add_nofetch(usage, delta) };
            let soft = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*rule).soft)) };
            let base = slot.and_then(|s| LIMIT_BASE.get(s).copied()).unwrap_or(0);
            if soft != 0 && unsafe { core::ptr::read_volatile(usage) }.wrapping_add(base) <= soft {
                unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*state).soft_over), 0) };
            }
        }
        i += 1;
    }
}

/// Releases `size` bytes from every limit in `slots`.
#[inline(always)]
pub fn release(slots: u64, size: u64) {
    adjust(slots, size.wrapping_neg());
}

/// After a charge of `size` under the limits in `slots` (reserved at the
/// call's entry): counts it as held by the process, for its release. Where
/// the release took the process's part first, nothing holds the bytes: the
/// reservation goes back.
#[inline(always)]
pub fn commit(proc: *mut ProcUsage, slots: u64, size: u64) {
    hold(proc, slots, size, true);
}

/// After a free of `size` bytes held under the limits in `slots`: gives
/// them back, unless the process's release took them first.
#[inline(always)]
pub fn uncommit(proc: *mut ProcUsage, slots: u64, size: u64) {
    hold(proc, slots, size, false);
}

/// Changes what the process holds under each limit of `slots` by `size`
/// (more if `charge`, less if not), claiming its per-limit amounts as
/// needed; see held.rs for the release it may race. A limit with no
/// amount left for it in the process (all taken by other limits) counts as
/// held: it keeps the reservation until the free.
#[inline(always)]
fn hold(proc: *mut ProcUsage, slots: u64, size: u64, charge: bool) {
    if slots == 0 {
        return; // no limit applies: the common case, and cheap
    }
    let delta = if charge { size } else { size.wrapping_neg() };
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        if let Some(slot) = limit_list::at(slots, i) {
            // SAFETY: checked map value pointer.
            let (ids, amounts) = unsafe {
                (core::ptr::addr_of_mut!((*proc).limit_slots), core::ptr::addr_of_mut!((*proc).limit_bytes))
            };
            let held =
                held::change_keyed(ids.cast(), amounts.cast(), PROC_LIMIT_SLOTS, slot as u64 + 1, delta)
                    .is_none_or(|(_, changed)| changed);
            // A charge the release beat holds nothing; a free that beat the
            // release gives back its own bytes.
            if held != charge {
                release(slot as u64 + 1, size);
            }
        }
        i += 1;
    }
}

/// At the process's release (exit.rs, once claimed): takes what it holds
/// under each limit and gives that back.
#[inline(always)]
pub fn release_process(proc: *mut ProcUsage) {
    let mut pair = 0;
    while pair < PROC_LIMIT_SLOTS {
        let pair_at = crate::account::bounded(pair, PROC_LIMIT_SLOTS);
        // SAFETY: checked map value pointer; the id read after the take
        // sees any claim made by a change the take included.
        let taken = held::take(unsafe { core::ptr::addr_of_mut!((*proc).limit_bytes[pair_at]) });
        let id = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*proc).limit_slots[pair_at])) };
        if id != 0 && id <= MAX_LIMITS as u64 && taken != 0 {
            release(id, taken);
        }
        pair += 1;
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn report(event: u32, slot: u32, size: u64, usage: u64, limit: u64, api: u32, action: u32, signal: u32) {
    emit(EventRecord {
        pid_tgid: bpf_get_current_pid_tgid(),
        cgroup_id: unsafe { aya_ebpf::helpers::bpf_get_current_cgroup_id() },
        event,
        addr: slot as u64,
        size,
        proc_total: usage,
        cgroup_total: limit,
        result: action,
        api,
        flags: signal,
        device: DEVICE_ANY,
        ..EventRecord::default()
    });
}

/// Never attached: `gpumem` loads it to learn whether this kernel lets
/// uprobe programs write registers (what `deny` needs). Kernels that do not
/// reject it at load with `invalid bpf_context access`.
#[aya_ebpf::macros::uprobe]
pub fn probe_register_write(ctx: aya_ebpf::programs::ProbeContext) -> u32 {
    // SAFETY: never runs; only its load is attempted.
    unsafe { (*ctx.regs).rax = 0 };
    0
}
