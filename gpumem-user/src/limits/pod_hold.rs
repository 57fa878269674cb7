//! Processes the kernel held at exec in a pod the agent had not seen
//! (gpumem-ebpf's families/pods.rs): the kernel's maps of the cgroups pods
//! are made in and of the pods seen, which the pods' step keeps
//! (`pod_rules.rs`), the heartbeat without which the kernel holds no one,
//! and the held processes, let go on once their pod's rules are made.
use std::collections::{HashMap, HashSet};

use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use gpumem_common::{map_name, pod_hold};
use nix::{errno::Errno, sys::signal::Signal, unistd::Pid};

use super::table::LimitError;
use crate::{bpf::Tracer, decode::Origin, output::lines::monotonic_ns};

/// A held process let go on (or found gone).
#[derive(Debug, Clone)]
pub struct Released {
    /// Its `held` record's (or, for one an earlier agent saw, now).
    pub origin: Origin,
    pub pod_cgroup_id: u64,
    /// How long it was held.
    pub held_ns: u64,
    /// false: it had exited (or been killed) while held.
    pub resumed: bool,
}

pub struct PodHold {
    parents: BpfHashMap<MapData, u64, u32>,
    seen: BpfHashMap<MapData, u64, u32>,
    held: BpfHashMap<MapData, u32, u64>,
    hold: Array<MapData, u64>,
    /// What the kernel's maps hold, as written.
    written_parents: HashSet<u64>,
    written_seen: HashSet<u64>,
    /// The `held` records read, by pid.
    records: HashMap<u32, (Origin, u64)>,
}

fn write_error(what: &str, e: aya::maps::MapError) -> LimitError {
    LimitError::Write { target: what.into(), source: Box::new(e) }
}

impl PodHold {
    pub fn open(tracer: &mut Tracer) -> Result<Self, LimitError> {
        Ok(Self {
            parents: tracer.take_map(map_name::POD_PARENTS)?,
            seen: tracer.take_map(map_name::POD_SEEN)?,
            held: tracer.take_map(map_name::POD_HELD)?,
            hold: tracer.take_map(map_name::POD_HOLD)?,
            written_parents: HashSet::new(),
            written_seen: HashSet::new(),
            records: HashMap::new(),
        })
    }

    /// Whether the kernel holds processes of unseen pods (rules on pods
    /// in force), with a heartbeat of now.
    pub fn arm(&mut self, armed: bool) -> Result<(), LimitError> {
        self.hold.set(pod_hold::ARMED, armed as u64, 0).map_err(|e| write_error("(pods: armed)", e))?;
        self.beat()
    }

    /// The heartbeat: the kernel holds no one once it is
    /// `pod_hold::FRESH_NS` old.
    pub fn beat(&mut self) -> Result<(), LimitError> {
        self.hold.set(pod_hold::BEAT, monotonic_ns(), 0).map_err(|e| write_error("(pods: heartbeat)", e))
    }

    /// The agent stops: the kernel holds no one from now (the heartbeat
    /// stale, rules on pods off), and everyone held goes on.
    pub fn stop(&mut self) -> Vec<Released> {
        let _ = self.hold.set(pod_hold::ARMED, 0, 0);
        let _ = self.hold.set(pod_hold::BEAT, 0, 0);
        self.release(|_| true)
    }

    /// The cgroups pods are made in (`kubepods` and its QoS cgroups).
    pub fn set_parents(&mut self, ids: HashSet<u64>) -> Result<(), LimitError> {
        sync(&mut self.parents, &mut self.written_parents, ids).map_err(|e| write_error("(pods: parents)", e))
    }

    /// The pods whose rules are made (or that none apply to).
    pub fn set_seen(&mut self, ids: HashSet<u64>) -> Result<(), LimitError> {
        sync(&mut self.seen, &mut self.written_seen, ids).map_err(|e| write_error("(pods: seen)", e))
    }

    /// A `held` record: process `origin.pid`, held for pod `pod`.
    pub fn held(&mut self, origin: Origin, pod: u64) {
        self.records.insert(origin.pid, (origin, pod));
    }

    /// Lets go on each held process whose pod is seen now.
    pub fn release_seen(&mut self) -> Vec<Released> {
        let seen = self.written_seen.clone();
        self.release(|pod| seen.contains(&pod))
    }

    /// Lets go on each held process whose pod `go` says (SIGCONT), and
    /// forgets each held process gone.
    fn release(&mut self, go: impl Fn(u64) -> bool) -> Vec<Released> {
        let now = monotonic_ns();
        let held: Vec<(u32, u64)> = self.held.iter().flatten().collect();
        let mut out = Vec::new();
        for (pid, pod) in held {
            // Only those let go are signalled; the others are asked
            // whether they still exist.
            let signal = go(pod).then_some(Signal::SIGCONT);
            let resumed = match nix::sys::signal::kill(Pid::from_raw(pid as i32), signal) {
                Ok(()) if signal.is_some() => true,
                Ok(()) => continue,
                Err(Errno::ESRCH) => false,
                Err(e) => {
                    tracing::warn!("letting held pid {pid} go on (SIGCONT): {e}");
                    continue;
                }
            };
            let _ = self.held.remove(&pid);
            let (origin, since) = match self.records.remove(&pid) {
                Some((o, _)) => {
                    let ts = o.ts_ns;
                    (o, ts)
                }
                None => (unread(pid), now),
            };
            out.push(Released { origin, pod_cgroup_id: pod, held_ns: now.saturating_sub(since), resumed });
        }
        out
    }
}

/// A fresh agent's start (no earlier agent's maps adopted): the kernel
/// may have held processes for an agent that died without letting them go
/// on, and whose maps went with it; each process stopped (state `T`) in a
/// pod's cgroup (`pods`: their paths) is let go on, and said. (One stopped
/// there by anyone else is let go on too: rare in a pod, which has no
/// terminal.)
pub fn continue_stopped_in_pods(pods: &[String]) {
    if pods.is_empty() {
        return;
    }
    let Ok(procs) = procfs::process::all_processes() else { return };
    for p in procs.flatten() {
        let Ok(stat) = p.stat() else { continue };
        if stat.state != 'T' {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{}/cgroup", p.pid)) else { continue };
        let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) else { continue };
        let in_pod = pods.iter().any(|pod| path == pod || path.starts_with(&format!("{pod}/")));
        if in_pod && nix::sys::signal::kill(Pid::from_raw(p.pid), Signal::SIGCONT).is_ok() {
            tracing::info!(
                "pid {} ({}) was stopped in a pod's cgroup ({path}) when the agent started: let go on (an agent \
                 that died may have held it at its exec)",
                p.pid,
                stat.comm
            );
        }
    }
}

/// Makes a kernel set hold `want`.
fn sync(
    map: &mut BpfHashMap<MapData, u64, u32>,
    written: &mut HashSet<u64>,
    want: HashSet<u64>,
) -> Result<(), aya::maps::MapError> {
    for id in want.difference(written) {
        map.insert(id, 1, 0)?;
    }
    for id in written.difference(&want) {
        let _ = map.remove(id);
    }
    *written = want;
    Ok(())
}

/// The origin of a held process whose record this agent did not read.
fn unread(pid: u32) -> Origin {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    Origin {
        ts_ns: monotonic_ns(),
        pid,
        tid: pid,
        cgroup_id: 0,
        comm: comm.trim_end().into(),
        api: gpumem_common::id::NONE,
    }
}
