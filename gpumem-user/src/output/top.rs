//! What the agent answers to `top` (`gpumem top`): the usage table and the
//! limits as `status` and `limit list` give them, the latest limit
//! decisions and failed allocations, and each process's oldest live
//! allocations, in one answer.
use serde::{Deserialize, Serialize};

use gpumem_common::{id, kind};

use super::{
    lines::{DecisionEvent, EventLine, LimitLine, Line, RecordEvent},
    status::{LimitStatus, StatusReport},
};
use crate::ledger::LiveAllocation;

/// The answer to `top`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TopReport {
    /// CLOCK_MONOTONIC (ns) when the agent answered: the records' clock,
    /// which every `ts_ns` here is on.
    pub now_ns: u64,
    pub status: StatusReport,
    pub limits: Vec<LimitStatus>,
    /// The latest limit decisions and failed allocations, oldest first.
    pub recent: Vec<RecentEvent>,
    /// Each process the ledger holds, with its oldest live allocations.
    pub oldest: Vec<ProcessAllocations>,
}

/// What a [`RecentEvent`] is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RecentKind {
    /// A hard limit's decision (`limit` record).
    Limit,
    /// A soft limit crossed (`limit_soft` record).
    LimitSoft,
    /// An allocation the driver refused (`alloc_failed` record).
    AllocFailed,
}

impl RecentKind {
    /// The name the records use.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Limit => DecisionEvent::Limit.name(),
            Self::LimitSoft => DecisionEvent::LimitSoft.name(),
            Self::AllocFailed => RecordEvent::AllocFailed.name(),
        }
    }
}

/// A limit decision or a failed allocation, as `top` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecentEvent {
    pub ts_ns: u64,
    pub event: RecentKind,
    pub pid: u32,
    pub comm: String,
    pub cgroup: Option<String>,
    /// The entry point called.
    pub api: String,
    /// Bytes the call asked for.
    pub bytes: u64,
    /// The device, for a failed allocation where it was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The driver's CUresult, for a failed allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<u32>,
    /// The limit's target, for a decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The hard (or soft) limit and the usage under it before the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<u64>,
    /// What was done, for a decision (`audit`, `signal:9`, `deny`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl RecentEvent {
    /// The entry of a line `top` lists: a limit decision or a failed
    /// allocation; None for any other line.
    pub fn of(line: &Line) -> Option<Self> {
        match line {
            Line::Limit(l) => Some(Self::of_decision(l)),
            Line::Event(e) if e.caller.event == RecordEvent::AllocFailed => Some(Self::of_failure(e)),
            _ => None,
        }
    }

    fn of_decision(l: &LimitLine) -> Self {
        let c = &l.caller;
        let event = match c.event {
            DecisionEvent::Limit => RecentKind::Limit,
            DecisionEvent::LimitSoft => RecentKind::LimitSoft,
        };
        Self {
            ts_ns: c.ts_ns,
            event,
            pid: c.pid,
            comm: c.comm.to_string(),
            cgroup: c.cgroup.as_deref().map(str::to_string),
            api: c.api.to_string(),
            bytes: l.request,
            device: None,
            result: None,
            limit: Some(l.limit.clone()),
            limit_bytes: Some(l.limit_bytes),
            usage: Some(l.usage),
            action: Some(l.action.clone()),
        }
    }

    fn of_failure(e: &EventLine) -> Self {
        let c = &e.caller;
        Self {
            ts_ns: c.ts_ns,
            event: RecentKind::AllocFailed,
            pid: c.pid,
            comm: c.comm.to_string(),
            cgroup: c.cgroup.as_deref().map(str::to_string),
            api: c.api.to_string(),
            bytes: e.size,
            device: e.device,
            result: e.result,
            limit: None,
            limit_bytes: None,
            usage: None,
            action: None,
        }
    }
}

/// One process's live allocations: how many, and the oldest.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessAllocations {
    pub pid: u32,
    /// Live allocations the process holds.
    pub live: u64,
    /// The oldest of them, oldest first.
    pub oldest: Vec<Allocation>,
}

/// One live allocation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Allocation {
    /// When it was allocated.
    pub ts_ns: u64,
    /// How long it has been held, at the answer's `now_ns`.
    pub age_ns: u64,
    pub size: u64,
    pub kind: String,
    pub device: Option<u32>,
    /// The entry point that allocated it.
    pub api: String,
    pub addr: String,
}

impl Allocation {
    /// A ledger entry, aged at `now_ns`.
    pub fn of(a: &LiveAllocation<'_>, now_ns: u64) -> Self {
        Self {
            ts_ns: a.ts_ns,
            age_ns: now_ns.saturating_sub(a.ts_ns),
            size: a.size,
            kind: kind::name(a.kind).to_string(),
            device: a.device,
            api: id::name(a.api).to_string(),
            addr: format!("{:#x}", a.key.1),
        }
    }
}
