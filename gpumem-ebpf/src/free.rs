//! Frees whose first argument is the address (`cuMemFree_v2` and the same
//! shape). The entry takes the allocation out of the live map, so an
//! address the driver hands to another thread before this return cannot be
//! confused with it; the return uncharges it if the driver succeeded and
//! puts it back if not.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gpumem_common::{
    cookie_api, cookie_kind, event_type, ns, stat, EventRecord, LiveAlloc, LiveKey, Pending, CUDA_SUCCESS,
    DEVICE_UNKNOWN, FLAG_UNTRACKED,
};

use crate::{
    account::{cookie, count, current, emit, put_pending, take_pending, uncharge_current},
    exclusive::{exclusive, prog},
    maps::LIVE,
};

#[uprobe]
pub fn free_entry(ctx: ProbeContext) -> u32 {
    exclusive(prog::FREE_ENTRY, || free_entry_run(ctx))
}

#[inline(always)]
fn free_entry_run(ctx: ProbeContext) -> u32 {
    let c = cookie(&ctx);
    let (api, kind) = (cookie_api(c), cookie_kind(c));
    let addr = ctx.arg::<u64>(0).unwrap_or(0);
    let key = live_key(ns::for_kind(kind), addr);
    let mut pending = Pending {
        arg: addr,
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        device: DEVICE_UNKNOWN,
        ..Pending::default()
    };
    // SAFETY: copied out before removal.
    if let Some(live) = unsafe { LIVE.get(key) }.copied() {
        let _ = LIVE.remove(key);
        pending.found = 1;
        pending.live = live;
    }
    put_pending(api, &pending);
    0
}

#[uretprobe]
pub fn free_return(ctx: RetProbeContext) -> u32 {
    exclusive(prog::FREE_RETURN, || free_return_run(ctx))
}

#[inline(always)]
fn free_return_run(ctx: RetProbeContext) -> u32 {
    let c = cookie(&ctx);
    let (api, kind) = (cookie_api(c), cookie_kind(c));
    let Some(p) = take_pending(api) else { return 0 };
    let result = ctx.ret::<u64>() as u32;
    let key = live_key(ns::for_kind(kind), p.arg);
    if result != CUDA_SUCCESS {
        // The driver kept the allocation: it is still live and charged.
        if p.found == 1 && LIVE.insert(key, p.live, 0).is_err() {
            count(stat::MAP_FULL);
        }
        return 0;
    }
    let mut rec = EventRecord {
        pid_tgid: bpf_get_current_pid_tgid(),
        event: event_type::FREE,
        addr: p.arg,
        result,
        api,
        kind,
        ..EventRecord::default()
    };
    if !(p.found == 1 && record_free(&mut rec, key.tgid, &p.live)) {
        record_untracked_free(&mut rec, key.tgid, p.cgroup_id);
    }
    0
}

/// Sends `rec` as a free of something gpumem never saw allocated: nothing
/// is uncharged.
#[inline(always)]
pub fn record_untracked_free(rec: &mut EventRecord, tgid: u32, cgroup_id: u64) {
    let t = current(tgid, cgroup_id);
    rec.event = event_type::FREE;
    rec.cgroup_id = cgroup_id;
    rec.device = DEVICE_UNKNOWN;
    rec.flags = FLAG_UNTRACKED;
    rec.proc_total = t.proc_total;
    rec.cgroup_total = t.cgroup_total;
    emit(*rec);
}

/// Uncharges a live allocation that is gone and sends `rec` as its free;
/// false (nothing done) when it was charged to an earlier image of the
/// process, released already.
#[inline(always)]
pub fn record_free(rec: &mut EventRecord, tgid: u32, live: &LiveAlloc) -> bool {
    let Some(t) = uncharge_current(tgid, live) else { return false };
    rec.event = event_type::FREE;
    rec.cgroup_id = live.cgroup_id;
    rec.size = live.size;
    rec.kind = live.kind;
    rec.device = live.device;
    rec.generation = live.generation;
    rec.proc_total = t.proc_total;
    rec.cgroup_total = t.cgroup_total;
    emit(*rec);
    true
}

#[inline(always)]
pub fn live_key(namespace: u32, addr: u64) -> LiveKey {
    LiveKey { tgid: (bpf_get_current_pid_tgid() >> 32) as u32, ns: namespace, addr }
}
