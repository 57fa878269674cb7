//! The limit decision, made here and nowhere else: at the entry of every
//! charging call, before the driver runs.
//!
//! The limits that apply to the caller are its process's, its comm's, and
//! those of its cgroup and its ancestors (a cgroup limit covers the
//! subtree, as memory.max does), at most `LIMITS_PER_CALL` of them, nearest
//! first; then the ones its process declared in its environment
//! (account/declared.rs), each checked apart from those. For each, the request is reserved with an atomic fetch-add,
//! which gives the usage that add made: over the hard limit, the
//! reservation is undone and the limit's action applies (audit keeps it).
//! Racing callers are ordered by their adds, each seeing those before it,
//! so together they never pass a limit (at worst one is refused for a
//! reservation that is then undone). The return commits the reservation
//! at the size the driver charged, or rolls it back; frees and exit
//! release it (each byte once, see held.rs).
use aya_ebpf::helpers::generated::{bpf_get_current_ancestor_cgroup_id, bpf_send_signal};
use gpumem_common::{
    event_type, limit_action, limit_list, limit_scope, limit_view, limits_in_force, CgroupDevice,
    CgroupLimits, Decision, LimitKey, LimitRule, LimitState, TargetRules, DEVICE_ANY, INDEX_DEVICES,
    LIMITS_PER_CALL, MAX_CGROUP_DEPTH,
};

use crate::{
    account::{declared, limit_usage::release},
    base::{
        atomic::{add_nofetch, compare_exchange, fetch_add},
        records::{emit, Subject},
        task::Task,
    },
    maps::{
        CGROUP_LIMITS, COMM_LIMITS, DECLARED, LIMITS, LIMITS_IN_FORCE, LIMIT_BASE, LIMIT_INDEX,
        LIMIT_INDEX_GENERATION, LIMIT_STATE,
    },
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

/// What a call on `device` pushes of a target's rules (see
/// `TargetRules::on`; 0: the target has none).
#[inline(always)]
fn on_device(rules: Option<&TargetRules>, device: u32) -> u64 {
    match rules {
        Some(r) => r.on[device as usize % INDEX_DEVICES],
        None => 0,
    }
}

/// The limits that apply to the calling process's call on `device` (see
/// `limit_list`): pushed farthest first, the root cgroup down to the
/// caller's, then its comm, then the process. Only the kinds of target
/// `kinds` names (see `limits_in_force`) are looked up. `cgroup_id`: the
/// caller's (`task`).
#[inline(always)]
fn applicable(task: Task, tgid: u32, kinds: u32, device: u32, cgroup_id: u64) -> u64 {
    let mut list = 0u64;
    if kinds & limits_in_force::CGROUP != 0 {
        list = cgroup_limits(device, cgroup_id);
    }
    if kinds & limits_in_force::COMM != 0 {
        let comm = crate::base::comm::of(task);
        // SAFETY: read in place, one u64.
        list = limit_list::push_all(list, on_device(unsafe { COMM_LIMITS.get(comm) }, device));
    }
    if kinds & limits_in_force::PROCESS != 0 {
        let key = LimitKey { scope: limit_scope::PROCESS, _pad: 0, id: tgid as u64 };
        // SAFETY: read in place, one u64.
        list = limit_list::push_all(list, on_device(unsafe { LIMIT_INDEX.get(key) }, device));
    }
    limit_list::nearest(list)
}

/// What the caller's cgroup and its ancestors push for a call on `device`
/// (the root first): kept in `CGROUP_LIMITS` while the agent has not
/// changed `LIMIT_INDEX` since it was walked, else walked again and kept.
/// The generation is read before the walk (and the agent bumps it after
/// its change), so a walk racing a change is kept under the generation
/// before the bump: walked again after it. `cgroup_id`: the caller's (the
/// walk asks the kernel for its ancestors).
#[inline(always)]
fn cgroup_limits(device: u32, cgroup_id: u64) -> u64 {
    let generation = crate::base::generation(&LIMIT_INDEX_GENERATION);
    let device = device % INDEX_DEVICES as u32;
    // Opaque: as the caller's value, the verifier walked `alloc_entry`
    // 5,080 instructions longer (25,460 -> 30,540).
    let key = CgroupDevice { cgroup_id: crate::base::opaque(cgroup_id), device, _pad: 0 };
    // SAFETY: copied out at once.
    if let Some(kept) = unsafe { CGROUP_LIMITS.get(key) }.copied() {
        if kept.generation == generation && kept.key == key {
            return kept.list;
        }
    }
    let list = walk_cgroups(device);
    let _ = CGROUP_LIMITS.insert(key, CgroupLimits { generation, list, key }, 0);
    list
}

/// The limits of the caller's cgroup and its ancestors in `LIMIT_INDEX`
/// for a call on `device`, pushed farthest first.
#[inline(always)]
fn walk_cgroups(device: u32) -> u64 {
    let mut list = 0u64;
    // Below the caller's own cgroup the helper answers 0, and the walk
    // stops there: each call costs ~25 ns, and a caller a few levels deep
    // would otherwise make a dozen for nothing. (Walked to its full count
    // with a flag instead, the verifier processes 6x the instructions;
    // with the `break`, 1.4x.)
    let mut level = 0;
    while level <= MAX_CGROUP_DEPTH as i32 {
        // SAFETY: plain helper call.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(level) };
        if id == 0 {
            break;
        }
        let key = LimitKey { scope: limit_scope::CGROUP, _pad: 0, id };
        // SAFETY: read in place, one u64.
        list = limit_list::push_all(list, on_device(unsafe { LIMIT_INDEX.get(key) }, device));
        level += 1;
    }
    list
}

/// The caller's process, the kinds of limit in force, and the limits
/// that apply to the caller's call on `device` (packed, see
/// [`applicable`]); None while no limit is in force (`LIMITS_IN_FORCE[1]`:
/// some process declared one). `cgroup_id`: the caller's (`task`).
#[inline(always)]
fn caller_limits(task: Task, device: u32, cgroup_id: u64) -> Option<(u32, u32, u64)> {
    let mut kinds = LIMITS_IN_FORCE.get(0).copied().unwrap_or(0);
    if LIMITS_IN_FORCE.get(1).copied().unwrap_or(0) != 0 {
        kinds |= limits_in_force::DECLARED;
    }
    // With no limit in force the caller's pid is not read.
    (kinds != 0).then(|| {
        let tgid = task.tgid();
        (tgid, kinds, applicable(task, tgid, kinds, device, cgroup_id))
    })
}

/// Limit `slot`'s rule (read once) and count, if the rule is in force and
/// counts `device` (a target's rules for one device name other devices'
/// rules where their devices share an entry).
#[inline(always)]
fn rule_on(slot: u32, device: u32) -> Option<(LimitRule, *mut LimitState)> {
    let (Some(rule), Some(state)) = (LIMITS.get_ptr(slot), LIMIT_STATE.get_ptr_mut(slot)) else {
        return None;
    };
    // SAFETY: checked map value pointer; read once.
    let r = unsafe { core::ptr::read_volatile(rule) };
    (r.active != 0 && (r.device == DEVICE_ANY || r.device == device)).then_some((r, state))
}

/// Reserves `size` bytes on `device` under every limit of the caller, or
/// refuses the call (and acts) at the first limit it would cross: the
/// agent's rules, nearest first, then the process's own declared limits.
/// `can_deny`: this call can be made to fail (see `deny.rs`); where it
/// cannot, a deny limit only records, as audit does. `cgroup_id`: the
/// caller's (`task`), read once by the caller.
#[inline(always)]
pub fn admit(task: Task, size: u64, device: u32, cgroup_id: u64, api: u32, can_deny: bool) -> Admission {
    let Some((tgid, kinds, candidates)) = caller_limits(task, device, cgroup_id) else {
        return Admission { slots: 0, refused: false, deny: false };
    };
    let call = Call { size, api, can_deny };
    let mut reserved = 0u64;
    let mut refused = None;
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        let Some(slot) = limit_list::at(candidates, i) else { break };
        i += 1;
        let Some((r, state)) = rule_on(slot, device) else { continue };
        let base = LIMIT_BASE.get(slot).copied().unwrap_or(0);
        refused = reserve(&call, (&r, state, base), slot);
        if refused.is_some() {
            break;
        }
        reserved = limit_list::put(reserved, i - 1, slot);
    }
    if refused.is_none() && kinds & limits_in_force::DECLARED != 0 {
        // `reserved` is 0 where no rule reserved the call: opaque, the
        // declared limits are walked once, not once for that constant
        // (alloc_entry: 41k -> 28k instructions verified).
        (reserved, refused) = admit_declared(&call, tgid, device, crate::base::opaque(reserved));
    }
    match refused {
        Some(deny) => {
            release(tgid, reserved, size);
            Admission { slots: 0, refused: true, deny }
        }
        None => Admission { slots: reserved, refused: false, deny: false },
    }
}

/// [`admit`] under the process's own declared limits, after the agent's
/// rules reserved the call under `reserved`: the list with them, and
/// whether one refused the call (then deny or not).
#[inline(always)]
fn admit_declared(call: &Call, tgid: u32, device: u32, reserved: u64) -> (u64, Option<bool>) {
    let Some(d) = DECLARED.get_ptr_mut(tgid) else { return (reserved, None) };
    let mut bits = 0;
    let mut k = 0;
    while k < 2 {
        let (limit, bit, slot) = if k == 0 {
            (declared::total(d, device), limit_list::DECLARED_TOTAL_BIT, limit_list::DECLARED_TOTAL)
        } else {
            (
                declared::of_device(d, device),
                limit_list::DECLARED_DEVICE_BIT,
                limit_list::DECLARED_DEVICE + device,
            )
        };
        k += 1;
        let Some((r, state)) = limit else { continue };
        let refused = reserve(call, (&r, state, 0), slot);
        if refused.is_some() {
            return (limit_list::with_declared(reserved, bits, device), refused);
        }
        bits |= bit;
    }
    (limit_list::with_declared(reserved, bits, device), None)
}

/// The call being admitted.
struct Call {
    size: u64,
    api: u32,
    can_deny: bool,
}

/// Reserves the call under one limit (its rule, count, and the base the
/// count starts from; `slot` as records name it): None if it fits (or
/// the limit only records), else the call is refused, nothing of it
/// reserved here, and whether it is to be denied (else signalled).
#[inline(always)]
fn reserve(call: &Call, (r, state, base): (&LimitRule, *mut LimitState, u64), slot: u32) -> Option<bool> {
    let size = call.size;
    // SAFETY: checked map value pointer.
    let usage = unsafe { core::ptr::addr_of_mut!((*state).usage) };
    // SAFETY: as above.
    let after = unsafe { fetch_add(usage, size) }.wrapping_add(size).wrapping_add(base);
    if after > r.hard {
        let d = Decision {
            request: size,
            usage: after - size,
            limit: r.hard,
            slot,
            action: r.action,
            signal: r.signal,
            _pad: 0,
        };
        report(event_type::LIMIT, call.api, d);
        let deny = r.action == limit_action::DENY && call.can_deny;
        if r.action == limit_action::SIGNAL || deny {
            // SAFETY: as above.
            unsafe { add_nofetch(usage, size.wrapping_neg()) };
            if r.action == limit_action::SIGNAL {
                // SAFETY: plain helper call; the caller is the current task.
                unsafe { bpf_send_signal(r.signal) };
            }
            return Some(deny);
        }
    }
    if r.soft != 0 && after > r.soft {
        // SAFETY: as above.
        let flag = unsafe { core::ptr::addr_of_mut!((*state).soft_over) };
        // SAFETY: as above.
        if unsafe { compare_exchange(flag, 0, 1) } == 0 {
            let d = Decision {
                request: size,
                usage: after - size,
                limit: r.soft,
                slot,
                action: r.action,
                signal: 0,
                _pad: 0,
            };
            report(event_type::LIMIT_SOFT, call.api, d);
        }
    }
    None
}

/// What the caller is told card `device` has (families/view.rs): where a
/// limit with `view=limit` counts that device, (the smallest such hard
/// limit, the least left under any of its limits on the device, whatever
/// their view: 0 over one), so a process told a size is never told room a
/// limit would refuse; None where no such limit applies, and the driver's
/// figures stand.
#[inline(always)]
pub fn view(task: Task, device: u32) -> Option<(u64, u64)> {
    let (tgid, kinds, candidates) = caller_limits(task, device, task.cgroup_id())?;
    let mut seen = Seen { total: u64::MAX, left: u64::MAX, any: false };
    let mut i = 0;
    while i < LIMITS_PER_CALL {
        let Some(slot) = limit_list::at(candidates, i) else { break };
        i += 1;
        let Some((r, state)) = rule_on(slot, device) else { continue };
        seen.add(&r, state, LIMIT_BASE.get(slot).copied().unwrap_or(0));
    }
    if kinds & limits_in_force::DECLARED != 0 {
        if let Some(d) = DECLARED.get_ptr_mut(tgid) {
            if let Some((r, state)) = declared::total(d, device) {
                seen.add(&r, state, 0);
            }
            if let Some((r, state)) = declared::of_device(d, device) {
                seen.add(&r, state, 0);
            }
        }
    }
    seen.any.then_some((seen.total, seen.left))
}

/// What [`view`] gathers over the caller's limits.
struct Seen {
    total: u64,
    left: u64,
    any: bool,
}

impl Seen {
    #[inline(always)]
    fn add(&mut self, r: &LimitRule, state: *mut LimitState, base: u64) {
        // SAFETY: checked map value pointer.
        let usage = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*state).usage)) };
        self.left = self.left.min(r.hard.saturating_sub(usage.wrapping_add(base)));
        if r.view == limit_view::LIMIT {
            self.total = self.total.min(r.hard);
            self.any = true;
        }
    }
}

/// Sends a decision record (`limit` or `limit_soft`) for the caller (and
/// logs it, with `--bpf-log`).
#[inline(always)]
fn report(event: u32, api: u32, d: Decision) {
    crate::base::log::decision(event, &d);
    let task = Task::current();
    emit(event, api, Subject::of(task, task.cgroup_id()), d);
}
