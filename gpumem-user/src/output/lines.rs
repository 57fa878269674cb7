//! The records gpumem writes: one JSON object per line, the schema
//! docs/records.md documents. Sinks render these; nothing else decides
//! field names.
//! Every line also reads back (`Line` deserialises), so tests and tools
//! check typed records.
use std::{borrow::Cow, sync::Arc};

use compact_str::CompactString;

use serde::{Deserialize, Serialize};

use gpumem_common::{api::Family, id, kind};

pub use super::caller::Caller;

use crate::{
    decode::{Body, Change, Decision, Event, Origin},
    enrich::container::Container,
    output::{holders::Holders, status::StatusEntry},
};

/// The `event` of a kernel record about memory or a reported call.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RecordEvent {
    Alloc,
    Free,
    AllocFailed,
    Exit,
    Exec,
    /// Reported calls, named by their API's family.
    Context,
    Pool,
    Import,
    Export,
    Multicast,
    HostMapping,
    Call,
}

impl RecordEvent {
    /// The name the records use.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Alloc => "alloc",
            Self::Free => "free",
            Self::AllocFailed => "alloc_failed",
            Self::Exit => "exit",
            Self::Exec => "exec",
            Self::Context => "context",
            Self::Pool => "pool",
            Self::Import => "import",
            Self::Export => "export",
            Self::Multicast => "multicast",
            Self::HostMapping => "host_mapping",
            Self::Call => "call",
        }
    }

    /// A reported call's name: its API's family's
    /// (`gpumem_common::api::Family::call_record`).
    fn of_call(api: u32) -> Self {
        match gpumem_common::api::find(api).map(|a| a.family) {
            Some(Family::Context) => Self::Context,
            Some(Family::Pool) => Self::Pool,
            Some(Family::Import) => Self::Import,
            Some(Family::Export) => Self::Export,
            Some(Family::Multicast) => Self::Multicast,
            Some(Family::Host) => Self::HostMapping,
            _ => Self::Call,
        }
    }
}

/// The `event` of a limit decision.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum DecisionEvent {
    Limit,
    LimitSoft,
}

impl DecisionEvent {
    /// The name the records use.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Limit => "limit",
            Self::LimitSoft => "limit_soft",
        }
    }
}

/// Something a record says beyond its numbers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// A free of memory gpumem never saw allocated: nothing uncharged.
    Untracked,
    /// A charge beyond the cgroups one process's exit can uncharge.
    CgroupSlotsFull,
}

/// An allocation, free, failed allocation, reported call or process exit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EventLine {
    #[serde(flatten)]
    pub caller: Caller<RecordEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Arc<Container>>,
    pub device: Option<u32>,
    pub kind: Cow<'static, str>,
    pub size: u64,
    /// `0x` and up to 16 hex digits: held inline.
    pub addr: CompactString,
    /// The driver's CUresult; null for a free recorded at its entry.
    pub result: Option<u32>,
    pub proc_total: u64,
    pub cgroup_total: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
    /// For an `alloc_failed` with result 2: who held that device's memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holders: Option<Box<Holders>>,
}

impl EventLine {
    /// The line of a memory record or a reported call; None for a limit
    /// decision (see [`LimitLine`]).
    pub fn new(e: &Event, cgroup: Option<Arc<str>>, container: Option<Arc<Container>>) -> Option<Self> {
        let (event, c) = match &e.body {
            Body::Alloc(c) => (RecordEvent::Alloc, *c),
            Body::Free(c) => (RecordEvent::Free, *c),
            Body::AllocFailed(c) => (RecordEvent::AllocFailed, *c),
            Body::Call(c) => (RecordEvent::of_call(e.origin.api), *c),
            Body::Exit(r) | Body::Exec(r) => {
                let event =
                    if matches!(e.body, Body::Exit(_)) { RecordEvent::Exit } else { RecordEvent::Exec };
                let caller = Caller::new(&e.origin, event, "", cgroup);
                let released = Change { size: r.size, cgroup_total: r.cgroup_total, ..Change::default() };
                return Some(Self::with(caller, container, &released, ""));
            }
            Body::Limit(_) | Body::LimitSoft(_) | Body::Declared(_) | Body::Held(_) => return None,
        };
        let caller = Caller::new(&e.origin, event, id::name(e.origin.api), cgroup);
        Some(Self::with(caller, container, &c, kind::name(c.kind)))
    }

    fn with(
        caller: Caller<RecordEvent>,
        container: Option<Arc<Container>>,
        c: &Change,
        kind: &'static str,
    ) -> Self {
        let flags = [(c.untracked, Flag::Untracked), (c.cgroup_slots_full, Flag::CgroupSlotsFull)]
            .into_iter()
            .filter_map(|(set, flag)| set.then_some(flag))
            .collect();
        Self {
            caller,
            container,
            device: c.device,
            kind: Cow::Borrowed(kind),
            size: c.size,
            addr: hex(c.addr),
            result: c.result,
            proc_total: c.proc_total,
            cgroup_total: c.cgroup_total,
            flags,
            holders: None,
        }
    }
}

/// The `event` of a usage line.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UsageEvent {
    Usage,
}

/// What a usage line is about.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Process,
    Cgroup,
}

/// What a process or cgroup holds now: a status entry with a time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UsageLine {
    pub ts_ns: u64,
    pub event: UsageEvent,
    pub scope: Scope,
    #[serde(flatten)]
    pub entry: StatusEntry,
}

/// The `event` of a dropped line.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DroppedEvent {
    #[default]
    Dropped,
}

/// Kernel counters that moved since the last report: records lost and
/// accounting the kernel could not complete.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DroppedLine {
    pub ts_ns: u64,
    pub event: DroppedEvent,
    /// Records lost since the previous `dropped` line (ring buffer full).
    pub records: u64,
    /// Records lost since the agent started.
    pub total: u64,
    pub map_full: u64,
    pub unmatched_returns: u64,
    pub cgroup_slots_full: u64,
    pub out_ptr_unreadable: u64,
    /// Runs of gpumem's programs the kernel skipped (its recursion check;
    /// exit and exec programs only): events gpumem did not see.
    pub skipped_runs: u64,
    pub malformed: u64,
    /// Processes gone without their exit seen (a skipped run), released
    /// by the agent since it started.
    pub missed_exits: u64,
    /// Threads gone with calls still in flight in the kernel (a skipped
    /// run of their exit), whose reservations the agent gave back.
    #[serde(default)]
    pub missed_thread_exits: u64,
    /// Lines the output could not take (a full disk) and dropped, since
    /// the agent started.
    #[serde(default)]
    pub unwritten: u64,
}

/// A limit decision (`limit`) or a soft limit crossed (`limit_soft`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LimitLine {
    #[serde(flatten)]
    pub caller: Caller<DecisionEvent>,
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
    /// Where the limit came from, where not the agent's own rules: `env
    /// GPUMEM_LIMIT` (declared by the calling process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Who held what the limit counts, at the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holders: Option<Box<Holders>>,
}

impl LimitLine {
    /// The line of a decision, with its rule's name and (for `limit_soft`)
    /// the rule's action.
    pub fn new(
        o: &Origin,
        d: &Decision,
        soft: bool,
        cgroup: Option<Arc<str>>,
        rule: (String, String),
    ) -> Self {
        let event = if soft { DecisionEvent::LimitSoft } else { DecisionEvent::Limit };
        let (limit, rule_action) = rule;
        Self {
            caller: Caller::new(o, event, id::name(o.api), cgroup),
            limit,
            limit_bytes: d.limit,
            usage: d.usage,
            request: d.request,
            action: if soft { rule_action } else { d.taken.to_string() },
            source: None,
            holders: None,
        }
    }
}

/// Anything a sink writes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Line {
    Event(EventLine),
    Limit(LimitLine),
    Usage(UsageLine),
    Dropped(DroppedLine),
    Declared(Box<super::declared::DeclaredLine>),
    Held(super::held::HeldLine),
}

/// An address as `{:#x}` writes it, without core::fmt (which took a
/// tenth of the agent's time per record), built in a buffer and held
/// inline (CompactString's own `push` took 120 ns an address).
pub fn hex(n: u64) -> CompactString {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let top = (u64::BITS - n.leading_zeros()).max(1).div_ceil(4) as usize;
    let mut buf = *b"0x0000000000000000";
    for (i, b) in buf[2..2 + top].iter_mut().enumerate() {
        *b = DIGITS[(n >> (4 * (top - 1 - i))) as usize & 15];
    }
    let text = std::str::from_utf8(&buf[..2 + top]).unwrap_or("0x?");
    CompactString::new(text)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns()`, so
/// agent lines and kernel records share one time line.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC exists on every Linux; 0 only if it did not.
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64)
}

pub mod event_json;
#[cfg(test)]
mod tests;
