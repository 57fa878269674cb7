//! The first stage of the agent's pipeline: ring-buffer bytes to a typed
//! [`Event`]. The kernel's records are a header and the payload of their
//! event kind (`gpumem_common::record`); anything else (a length that does
//! not match its kind, an unknown kind) is a [`DecodeError`], counted as
//! malformed, never a panic.
use compact_str::CompactString;
use gpumem_common::{
    declare::declaration::Declaration, event_type, limit_action, payload_size, record, Header,
    DEVICE_UNKNOWN, FLAG_AT_ENTRY, FLAG_CGROUP_SLOTS_FULL, FLAG_REPLACED_STALE, FLAG_UNTRACKED,
};

/// One kernel record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub origin: Origin,
    pub body: Body,
}

/// Who and when: the header every record carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// Process (tgid) and thread.
    pub pid: u32,
    pub tid: u32,
    /// cgroup v2 id (for a free: the allocation's).
    pub cgroup_id: u64,
    /// The calling thread's name (at most 15 bytes: held inline, no
    /// allocation per record).
    pub comm: CompactString,
    /// `gpumem_common::api::id` (`NONE` for exit and exec).
    pub api: u32,
}

/// What the record reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Alloc(Change),
    Free(Change),
    AllocFailed(Change),
    /// A call reported, never charged (named by the API's family).
    Call(Change),
    Exit(Release),
    Exec(Release),
    Limit(Decision),
    LimitSoft(Decision),
    /// What a process declared in its environment at its exec (boxed: it
    /// is large and rare).
    Declared(Box<Declaration>),
    /// A process the kernel held at exec until its pod's rules are made.
    Held(gpumem_common::Held),
}

/// An allocation, a free, a failed allocation or a reported call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Change {
    pub addr: u64,
    pub size: u64,
    /// `gpumem_common::kind`.
    pub kind: u32,
    /// None when the thread's current context was not known.
    pub device: Option<u32>,
    /// The driver's CUresult; None for a free recorded at its entry,
    /// where it is final (see `gpumem_common::FLAG_AT_ENTRY`).
    pub result: Option<u32>,
    /// The kernel's totals right after this record.
    pub proc_total: u64,
    pub cgroup_total: u64,
    /// The process image the bytes belong to (0: none).
    pub generation: u64,
    /// A free of memory gpumem never saw allocated: nothing uncharged.
    pub untracked: bool,
    /// A charge beyond the cgroups one process's exit can uncharge.
    pub cgroup_slots_full: bool,
    /// An allocation that took the place of one whose free was never seen
    /// (`gpumem_common::FLAG_REPLACED_STALE`).
    pub replaced_stale: bool,
}

/// Everything a process image held, released at its exit or exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Release {
    pub size: u64,
    pub cgroup_total: u64,
    pub generation: u64,
}

/// A limit's decision on a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The limit's slot in the kernel.
    pub slot: u32,
    pub request: u64,
    /// Usage under the limit before the call.
    pub usage: u64,
    /// The hard limit (`limit`) or the soft one (`limit_soft`).
    pub limit: u64,
    /// What the kernel did (for `limit`).
    pub taken: Taken,
}

/// The action a limit took on a call that would cross it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    Audit,
    Signal(u32),
    Deny,
}

impl std::fmt::Display for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Taken::Audit => write!(f, "audit"),
            Taken::Signal(s) => write!(f, "signal:{s}"),
            Taken::Deny => write!(f, "deny"),
        }
    }
}

/// Why bytes from the ring buffer are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} bytes is shorter than a record header")]
    Short(usize),
    #[error("unknown event kind {0}")]
    UnknownEvent(u32),
    #[error("a {event} record of {len} bytes; it must be {want}")]
    Length { event: &'static str, len: usize, want: usize },
}

/// Decodes one ring-buffer item.
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    let head_len = size_of::<Header>();
    let Some(head) = bytes.get(..head_len) else {
        return Err(DecodeError::Short(bytes.len()));
    };
    let header: Header = bytemuck::pod_read_unaligned(head);
    let want = payload_size(header.event).ok_or(DecodeError::UnknownEvent(header.event))?;
    let payload = &bytes[head_len..];
    if payload.len() != want {
        let event = event_type::name(header.event);
        return Err(DecodeError::Length { event, len: bytes.len(), want: head_len + want });
    }
    let body = match header.event {
        event_type::ALLOC => Body::Alloc(change(payload)),
        event_type::FREE => Body::Free(change(payload)),
        event_type::ALLOC_FAILED => Body::AllocFailed(change(payload)),
        event_type::CALL => Body::Call(change(payload)),
        event_type::EXIT => Body::Exit(release(payload)),
        event_type::EXEC => Body::Exec(release(payload)),
        event_type::LIMIT => Body::Limit(decision(payload)),
        event_type::LIMIT_SOFT => Body::LimitSoft(decision(payload)),
        event_type::DECLARED => Body::Declared(Box::new(bytemuck::pod_read_unaligned(payload))),
        event_type::HELD => Body::Held(bytemuck::pod_read_unaligned(payload)),
        other => return Err(DecodeError::UnknownEvent(other)),
    };
    Ok(Event { origin: origin(&header), body })
}

fn origin(h: &Header) -> Origin {
    Origin {
        ts_ns: h.ts_ns,
        pid: h.tgid(),
        tid: h.tid(),
        cgroup_id: h.cgroup_id,
        comm: comm(&h.comm),
        api: h.api,
    }
}

fn change(payload: &[u8]) -> Change {
    let c: record::Change = bytemuck::pod_read_unaligned(payload);
    Change {
        addr: c.addr,
        size: c.size,
        kind: c.kind,
        device: (c.device != DEVICE_UNKNOWN).then_some(c.device),
        result: (c.flags & FLAG_AT_ENTRY == 0).then_some(c.result),
        proc_total: c.proc_total,
        cgroup_total: c.cgroup_total,
        generation: c.generation,
        untracked: c.flags & FLAG_UNTRACKED != 0,
        cgroup_slots_full: c.flags & FLAG_CGROUP_SLOTS_FULL != 0,
        replaced_stale: c.flags & FLAG_REPLACED_STALE != 0,
    }
}

fn release(payload: &[u8]) -> Release {
    let r: record::Release = bytemuck::pod_read_unaligned(payload);
    Release { size: r.size, cgroup_total: r.cgroup_total, generation: r.generation }
}

fn decision(payload: &[u8]) -> Decision {
    let d: record::Decision = bytemuck::pod_read_unaligned(payload);
    let taken = match d.action {
        limit_action::AUDIT => Taken::Audit,
        limit_action::SIGNAL => Taken::Signal(d.signal),
        _ => Taken::Deny,
    };
    Decision { slot: d.slot, request: d.request, usage: d.usage, limit: d.limit, taken }
}

/// A NUL-padded kernel comm as a string.
pub fn comm(raw: &[u8]) -> CompactString {
    let raw = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
    // CompactString's from_utf8_lossy builds by pushing: 60 ns a comm.
    match std::str::from_utf8(raw) {
        Ok(text) => CompactString::new(text),
        Err(_) => CompactString::from_utf8_lossy(raw),
    }
}

#[cfg(test)]
mod tests;
