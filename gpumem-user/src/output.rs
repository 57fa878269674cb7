//! The records gpumem writes: one JSON object per line, the schema the
//! README documents. Sinks render these; nothing else decides field names.
use serde::{Deserialize, Serialize};

use gpumem_common::{
    event_type, id, kind, EventRecord, DEVICE_UNKNOWN, FLAG_CGROUP_SLOTS_FULL, FLAG_UNTRACKED,
};

use crate::{
    enrich::container::Container,
    ledger::{comm, Usage},
};

/// An allocation, free, failed allocation or process exit.
/// Who made a call: the fields every kernel-sourced line starts with.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Caller {
    pub ts_ns: u64,
    pub event: &'static str,
    pub api: &'static str,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    pub cgroup: Option<String>,
}

impl Caller {
    pub fn new(r: &EventRecord, event: &'static str, api: &'static str, cgroup: Option<String>) -> Self {
        Self {
            ts_ns: r.ts_ns,
            event,
            api,
            pid: r.tgid(),
            tid: r.tid(),
            comm: comm(&r.comm),
            cgroup_id: r.cgroup_id,
            cgroup,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EventLine {
    #[serde(flatten)]
    pub caller: Caller,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    pub device: Option<u32>,
    pub kind: &'static str,
    pub size: u64,
    pub addr: String,
    pub result: u32,
    pub proc_total: u64,
    pub cgroup_total: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<&'static str>,
}

impl EventLine {
    pub fn new(r: &EventRecord, cgroup: Option<String>, container: Option<Container>) -> Self {
        let mut flags = Vec::new();
        if r.flags & FLAG_UNTRACKED != 0 {
            flags.push("untracked");
        }
        if r.flags & FLAG_CGROUP_SLOTS_FULL != 0 {
            flags.push("cgroup_slots_full");
        }
        let is_exit = r.event == event_type::EXIT || r.event == event_type::EXEC;
        let event =
            if r.event == event_type::CALL { id::call_name(r.api) } else { event_type::name(r.event) };
        Self {
            caller: Caller::new(r, event, if is_exit { "" } else { id::name(r.api) }, cgroup),
            container,
            device: device(r.device),
            kind: if is_exit { "" } else { kind::name(r.kind) },
            size: r.size,
            addr: format!("{:#x}", r.addr),
            result: r.result,
            proc_total: r.proc_total,
            cgroup_total: r.cgroup_total,
            flags,
        }
    }
}

fn device(d: u32) -> Option<u32> {
    (d != DEVICE_UNKNOWN).then_some(d)
}

/// Bytes held by one (kind, device) pair.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SplitLine {
    pub kind: String,
    pub device: Option<u32>,
    pub bytes: u64,
}

/// What a process or cgroup holds now: a status entry with a time.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UsageLine {
    pub ts_ns: u64,
    pub event: &'static str,
    /// "process" or "cgroup".
    pub scope: &'static str,
    #[serde(flatten)]
    pub entry: crate::control::StatusEntry,
}

impl UsageLine {
    pub fn split(usage: &Usage) -> Vec<SplitLine> {
        usage
            .split
            .iter()
            .map(|(&(k, d), &bytes)| SplitLine { kind: kind::name(k).to_string(), device: device(d), bytes })
            .collect()
    }
}

/// Kernel counters that moved since the last report: records lost and
/// accounting the kernel could not complete.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DroppedLine {
    pub ts_ns: u64,
    pub event: &'static str,
    /// Records lost since the previous `dropped` line (ring buffer full).
    pub records: u64,
    /// Records lost since the agent started.
    pub total: u64,
    pub map_full: u64,
    pub unmatched_returns: u64,
    pub cgroup_slots_full: u64,
    pub out_ptr_unreadable: u64,
    /// Runs of gpumem's programs the kernel skipped (another BPF program
    /// was running on that CPU): calls gpumem did not see whole.
    pub skipped_runs: u64,
    pub malformed: u64,
    /// Processes gone without their exit seen (a skipped run), released
    /// by the agent since it started.
    pub missed_exits: u64,
}

/// A limit decision (`limit`) or a soft limit crossed (`limit_soft`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LimitLine {
    #[serde(flatten)]
    pub caller: Caller,
    /// The rule's target, e.g. `cgroup:/team-a`.
    pub limit: String,
    /// The hard limit (`limit`) or the soft limit (`limit_soft`).
    pub limit_bytes: u64,
    /// Usage under the rule before this call.
    pub usage: u64,
    /// Bytes the call asked for.
    pub request: u64,
    /// What was done: `audit` (the call went ahead), `signal:N` (sent
    /// before the call ran; not charged), `deny`; for `limit_soft` the
    /// rule's action.
    pub action: String,
}

/// Anything a sink writes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Line {
    Event(EventLine),
    Limit(LimitLine),
    Usage(UsageLine),
    Dropped(DroppedLine),
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns()`, so
/// agent lines and kernel records share one time line.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_record_renders_the_documented_fields() {
        let r = EventRecord {
            ts_ns: 5,
            pid_tgid: (42u64 << 32) | 43,
            cgroup_id: 9,
            addr: 0x7f00_0000_1000,
            size: 4096,
            proc_total: 4096,
            cgroup_total: 8192,
            event: event_type::ALLOC,
            api: id::MEM_ALLOC_V2,
            kind: kind::DEVICE,
            device: 0,
            comm: *b"python3\0\0\0\0\0\0\0\0\0",
            ..Default::default()
        };
        let v: serde_json::Value =
            serde_json::to_value(Line::Event(EventLine::new(&r, Some("/a".into()), None))).unwrap();
        let expect = serde_json::json!({
            "ts_ns": 5, "event": "alloc", "api": "cuMemAlloc_v2", "pid": 42, "tid": 43,
            "comm": "python3", "cgroup_id": 9, "cgroup": "/a", "device": 0, "kind": "device",
            "size": 4096, "addr": "0x7f0000001000", "result": 0, "proc_total": 4096,
            "cgroup_total": 8192
        });
        assert_eq!(v, expect);
    }

    #[test]
    fn unknown_device_and_untracked_free_are_explicit() {
        let r = EventRecord {
            event: event_type::FREE,
            device: DEVICE_UNKNOWN,
            flags: FLAG_UNTRACKED,
            ..Default::default()
        };
        let v = serde_json::to_value(EventLine::new(&r, None, None)).unwrap();
        assert_eq!(v["device"], serde_json::Value::Null);
        assert_eq!(v["cgroup"], serde_json::Value::Null);
        assert_eq!(v["flags"], serde_json::json!(["untracked"]));
    }
}
