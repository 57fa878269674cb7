//! Allocations whose first two arguments are `(T **out, size_t bytesize)`:
//! `cuMemAlloc_v2` and every entry point of the same shape (the probe
//! table lists them). The entry remembers the request; the return charges
//! it if the driver succeeded and records the live allocation.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    cookie_api, cookie_kind, event_type, ns, stat, EventRecord, LiveAlloc, LiveKey, Pending,
    CUDA_SUCCESS,
};

use crate::{
    account::{charge, cookie, count, current, emit, put_pending, take_pending, uncharge},
    context::current_device,
    maps::LIVE,
};

#[uprobe]
pub fn alloc_entry(ctx: ProbeContext) -> u32 {
    let api = cookie_api(cookie(&ctx));
    let pending = Pending {
        out_ptr: ctx.arg::<u64>(0).unwrap_or(0),
        arg: ctx.arg::<u64>(1).unwrap_or(0),
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        device: current_device(),
        ..Pending::default()
    };
    put_pending(api, &pending);
    0
}

#[uretprobe]
pub fn alloc_return(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let (api, kind) = (cookie_api(c), cookie_kind(c));
    let Some(p) = take_pending(api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let mut rec = EventRecord {
        pid_tgid,
        cgroup_id: p.cgroup_id,
        size: p.arg,
        result,
        api,
        kind,
        device: p.device,
        ..EventRecord::default()
    };
    if result != CUDA_SUCCESS {
        let t = current(tgid, p.cgroup_id);
        rec.event = event_type::ALLOC_FAILED;
        rec.proc_total = t.proc_total;
        rec.cgroup_total = t.cgroup_total;
        emit(rec);
        return 0;
    }
    // SAFETY: reads user memory of the current process through the helper.
    let Ok(addr) = (unsafe { bpf_probe_read_user(p.out_ptr as *const u64) }) else {
        count(stat::OUT_PTR_UNREADABLE);
        return 0;
    };
    record_alloc(&mut rec, tgid, ns::for_kind(kind), addr);
    0
}

/// Charges a successful allocation, records it as live and sends `rec`
/// (which carries size, cgroup, kind, device and api already).
#[inline(always)]
pub fn record_alloc(rec: &mut EventRecord, tgid: u32, namespace: u32, addr: u64) {
    let key = LiveKey {
        tgid,
        ns: namespace,
        addr,
    };
    // An entry at this key is an allocation whose free we never saw (its
    // record was lost or it predates a restart): drop its charge first so
    // it is not counted twice.
    // SAFETY: copied out before removal.
    if let Some(stale) = unsafe { LIVE.get(key) }.copied() {
        let _ = LIVE.remove(key);
        uncharge(tgid, stale.cgroup_id, stale.cgroup_slot, stale.size);
    }
    let t = charge(tgid, rec.cgroup_id, rec.size);
    let live = LiveAlloc {
        size: rec.size,
        cgroup_id: rec.cgroup_id,
        kind: rec.kind,
        device: rec.device,
        cgroup_slot: t.slot,
        api: rec.api,
    };
    if LIVE.insert(key, live, 0).is_err() {
        count(stat::MAP_FULL);
    }
    rec.event = event_type::ALLOC;
    rec.addr = addr;
    rec.proc_total = t.proc_total;
    rec.cgroup_total = t.cgroup_total;
    if t.slot == gpumem_common::NO_SLOT {
        rec.flags |= gpumem_common::FLAG_CGROUP_SLOTS_FULL;
    }
    emit(*rec);
}
