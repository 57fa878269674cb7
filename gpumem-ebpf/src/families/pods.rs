//! Rules on Kubernetes pods are the agent's: it finds a pod, names it from
//! the kubelet's directories and writes the pod's rules on its cgroup.
//! So that a busy agent is never late for a pod's first allocation, a
//! process that execs in a pod the agent has not seen yet is stopped
//! (SIGSTOP) right there, before its new image runs, and the agent is
//! woken (a `held` record); it makes the pod's rules, then lets the
//! process go on (SIGCONT). Only while rules on pods are in force, and
//! only while the agent's heartbeat is fresh: an agent gone stops no one.
//!
//! The pod's cgroup is the one below the deepest `kubepods` or QoS cgroup
//! among the caller's ancestors (the agent lists those in `POD_PARENTS`);
//! no kernel structure's layout is read.
use aya_ebpf::helpers::{
    bpf_get_current_cgroup_id, bpf_ktime_get_ns,
    generated::{bpf_get_current_ancestor_cgroup_id, bpf_send_signal},
};
use gpumem_common::{event_type, id, pod_hold, Held, MAX_CGROUP_DEPTH};

use crate::{
    base::records::{emit_waking, Subject},
    base::task::Task,
    maps::{POD_HELD, POD_HOLD, POD_PARENTS, POD_SEEN},
};

/// SIGSTOP on x86-64 Linux.
const SIGSTOP: u32 = 19;

/// At exec, in the exec'ing task (its new image in place, not yet run):
/// holds it if it is in a pod the agent has not seen.
#[inline(always)]
pub fn at_exec(tgid: u32) {
    if POD_HOLD.get(pod_hold::ARMED).copied().unwrap_or(0) == 0 {
        return;
    }
    let beat = POD_HOLD.get(pod_hold::BEAT).copied().unwrap_or(0);
    // SAFETY: plain helper call.
    if unsafe { bpf_ktime_get_ns() }.wrapping_sub(beat) >= pod_hold::FRESH_NS {
        return;
    }
    let pod = pod_of_caller();
    if pod == 0 || POD_SEEN.get_ptr(pod).is_some() {
        return;
    }
    if POD_HELD.insert(tgid, pod, 0).is_err() {
        return; // full: not held rather than held with no one to resume it
    }
    // SAFETY: plain helper call; the signal goes to the current task.
    unsafe { bpf_send_signal(SIGSTOP) };
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let who = Subject::of(Task::current(), cgroup_id);
    emit_waking(event_type::HELD, id::NONE, who, Held { pod_cgroup_id: pod });
}

/// The caller's pod's cgroup id, 0 if it is in none: walking down from
/// the root, the first cgroup below the last `kubepods` or QoS cgroup.
#[inline(always)]
fn pod_of_caller() -> u64 {
    let (mut pod, mut below_parent) = (0u64, false);
    let mut level = 0;
    while level <= MAX_CGROUP_DEPTH as i32 {
        // SAFETY: plain helper call.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(level) };
        if id == 0 {
            break;
        }
        if POD_PARENTS.get_ptr(id).is_some() {
            (pod, below_parent) = (0, true);
        } else if below_parent {
            (pod, below_parent) = (id, false);
        }
        level += 1;
    }
    pod
}
