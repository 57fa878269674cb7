//! Process exit: when a thread-group leader that holds (or held) memory
//! exits, everything it still holds is uncharged from its cgroups and an
//! exit record tells the agent to forget the process.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use gpumem_common::{event_type, EventRecord, DEVICE_UNKNOWN, PROC_CGROUP_SLOTS};

use crate::{
    account::{current, emit, sub},
    maps::{CGROUP_USAGE, PROC_USAGE},
};

/// A raw tracepoint: attached by name through the BPF syscall, so it needs
/// no tracefs mount (many hosts and containers have none).
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn process_exit(_ctx: RawTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if tgid != pid_tgid as u32 {
        return 0; // not the leader: the process lives on
    }
    // SAFETY: copied out before removal.
    let Some(usage) = (unsafe { PROC_USAGE.get(tgid) }).copied() else {
        return 0; // never touched CUDA: the common case, and cheap
    };
    let mut i = 0;
    while i < PROC_CGROUP_SLOTS {
        let (id, bytes) = (usage.cgroup_ids[i], usage.cgroup_bytes[i]);
        if id != 0 && bytes != 0 {
            if let Some(cg) = CGROUP_USAGE.get_ptr_mut(id) {
                sub(cg, bytes);
            }
        }
        i += 1;
    }
    let _ = PROC_USAGE.remove(tgid);
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    emit(EventRecord {
        pid_tgid,
        cgroup_id,
        cgroup_total: current(tgid, cgroup_id).cgroup_total,
        event: event_type::EXIT,
        size: usage.bytes,
        device: DEVICE_UNKNOWN,
        ..EventRecord::default()
    });
    0
}
