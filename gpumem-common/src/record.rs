//! The records the kernel sends to the agent through the ring buffer: a
//! [`Header`] every record starts with, then the payload of its event
//! kind ([`Change`], [`Release`] or [`Decision`]). The header's `event`
//! says which payload follows; the agent checks the record's length
//! against it.

/// What a record reports; the header's `event`.
pub mod event_type {
    /// A successful allocation, now charged ([`super::Change`]).
    pub const ALLOC: u32 = 1;
    /// A free, now uncharged (size 0 and `FLAG_UNTRACKED` when the
    /// allocation predates the agent): at a successful return, or at the
    /// entry where the free is final there (`FLAG_AT_ENTRY`, no result
    /// known) ([`super::Change`]).
    pub const FREE: u32 = 2;
    /// An allocation the driver refused (`result` holds its CUresult);
    /// nothing was charged ([`super::Change`]).
    pub const ALLOC_FAILED: u32 = 3;
    /// A process that held memory exited; everything it held is uncharged
    /// ([`super::Release`]).
    pub const EXIT: u32 = 4;
    /// A call reported but never charged (contexts, pools, imports); the
    /// agent names it from the API's family. `addr` holds the handle,
    /// `size` the call's size argument if any ([`super::Change`]).
    pub const CALL: u32 = 5;
    /// A process that held memory exec'd: like `EXIT`; the process lives
    /// on with a new image ([`super::Release`]).
    pub const EXEC: u32 = 6;
    /// A call would have crossed a hard limit ([`super::Decision`]).
    pub const LIMIT: u32 = 7;
    /// Usage went above a soft limit, once per crossing
    /// ([`super::Decision`]).
    pub const LIMIT_SOFT: u32 = 8;
    /// A process exec'd with limits declared in its environment: what
    /// they are, and what of them is in force
    /// ([`crate::declare::declaration::Declaration`]).
    pub const DECLARED: u32 = 9;
    /// A process exec'd in a Kubernetes pod the agent has not seen yet,
    /// while rules on pods are in force: the kernel stopped it (SIGSTOP)
    /// until the agent has made the pod's rules and lets it go on
    /// ([`super::Held`]).
    pub const HELD: u32 = 10;

    /// The record's name in the output.
    pub const fn name(event: u32) -> &'static str {
        match event {
            ALLOC => "alloc",
            FREE => "free",
            ALLOC_FAILED => "alloc_failed",
            EXIT => "exit",
            CALL => "call",
            EXEC => "exec",
            LIMIT => "limit",
            LIMIT_SOFT => "limit_soft",
            DECLARED => "declared",
            HELD => "held",
            _ => "unknown",
        }
    }
}

/// The freed address was not in the live map (allocated before gpumem
/// attached, or its alloc record was lost): nothing was uncharged.
pub const FLAG_UNTRACKED: u32 = 1;
/// The process used more than `PROC_CGROUP_SLOTS` cgroups; this charge is
/// counted in the cgroup's total but cannot be uncharged at process exit.
pub const FLAG_CGROUP_SLOTS_FULL: u32 = 2;
/// A free recorded at its entry, where it is final (see
/// `api::Shape::Free`): the driver's result is not known, and `result` is 0.
pub const FLAG_AT_ENTRY: u32 = 4;
/// An allocation whose address the kernel's live map still held for an
/// allocation whose free was never seen: that one's charge was dropped.
/// Without it, an allocation at an address a reader still holds is one
/// the driver handed out again while another thread's free of it had not
/// yet returned: that free's record is still to come.
pub const FLAG_REPLACED_STALE: u32 = 8;

/// `device` when the calling thread's current context is not known.
pub const DEVICE_UNKNOWN: u32 = u32::MAX;

/// The kernel's `TASK_COMM_LEN`: a thread's name, NUL-padded.
pub const TASK_COMM_LEN: usize = 16;

/// The start of every record. 48 bytes, no padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Header {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at the record.
    pub ts_ns: u64,
    /// Thread group id (upper 32 bits) and thread id (lower 32 bits).
    pub pid_tgid: u64,
    /// cgroup v2 id of the caller at the call (for `free`: of the
    /// allocation; for `exit`: of the process).
    pub cgroup_id: u64,
    /// `comm` of the calling thread, NUL-padded.
    pub comm: [u8; TASK_COMM_LEN],
    /// One of [`event_type`]: which payload follows.
    pub event: u32,
    /// One of [`crate::api::id`] (`NONE` for exit and exec).
    pub api: u32,
}

impl Header {
    /// Thread group id (the process id as user space knows it).
    pub const fn tgid(&self) -> u32 {
        (self.pid_tgid >> 32) as u32
    }
    /// Thread id.
    pub const fn tid(&self) -> u32 {
        self.pid_tgid as u32
    }
}

/// `alloc`, `free`, `alloc_failed` and reported calls: a change in what a
/// process holds, or a call that changes nothing. 56 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Change {
    /// Device address, host address or handle.
    pub addr: u64,
    /// Bytes charged or uncharged (`alloc_failed`: requested).
    pub size: u64,
    /// The process's total after this record, from the kernel map.
    pub proc_total: u64,
    /// The cgroup's total after this record, from the kernel map.
    pub cgroup_total: u64,
    /// The process image the bytes belong to (its kernel
    /// `ProcUsage::generation`; 0 when none): `alloc` the image it charged,
    /// `free` the image the allocation was charged to. The ledger drops an
    /// `alloc` or `free` of an image it has already seen released (a charge
    /// racing its killed group's release can reach the ring buffer after
    /// the `exit` record).
    pub generation: u64,
    /// CUresult returned by the driver.
    pub result: u32,
    /// One of [`crate::kind`].
    pub kind: u32,
    /// Device ordinal, or [`DEVICE_UNKNOWN`].
    pub device: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
}

/// `exit` and `exec`: everything a process image held is released. 24
/// bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Release {
    /// Bytes the image held, now uncharged.
    pub size: u64,
    /// The header's cgroup's total after the release.
    pub cgroup_total: u64,
    /// The image released (see [`Change::generation`]).
    pub generation: u64,
}

/// `held`: the pod a process was stopped at exec for. 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Held {
    /// The pod's cgroup (the cgroup below its `kubepods` or QoS cgroup).
    pub pod_cgroup_id: u64,
}

/// `limit` and `limit_soft`: a limit's decision on a call. 40 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct Decision {
    /// Bytes the call asked for.
    pub request: u64,
    /// Usage under the limit before the call.
    pub usage: u64,
    /// The hard limit (`limit`) or the soft limit (`limit_soft`).
    pub limit: u64,
    /// The limit's slot (`LIMITS` index), or the caller's own declared
    /// limit's byte (`limit_list::DECLARED_TOTAL` and up).
    pub slot: u32,
    /// What was done (`limit`): one of [`crate::maps::limit_action`].
    pub action: u32,
    /// The signal sent, for `signal`.
    pub signal: u32,
    pub _pad: u32,
}

/// A record as the kernel reserves it in the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record<P> {
    pub header: Header,
    pub body: P,
}

/// The payload size an event kind must come with.
pub const fn payload_size(event: u32) -> Option<usize> {
    match event {
        event_type::ALLOC | event_type::FREE | event_type::ALLOC_FAILED | event_type::CALL => {
            Some(core::mem::size_of::<Change>())
        }
        event_type::EXIT | event_type::EXEC => Some(core::mem::size_of::<Release>()),
        event_type::LIMIT | event_type::LIMIT_SOFT => Some(core::mem::size_of::<Decision>()),
        event_type::DECLARED => Some(core::mem::size_of::<crate::declare::declaration::Declaration>()),
        event_type::HELD => Some(core::mem::size_of::<Held>()),
        _ => None,
    }
}

const _: () = {
    assert!(core::mem::size_of::<Header>() == 48);
    assert!(core::mem::size_of::<Change>() == 56);
    assert!(core::mem::size_of::<Release>() == 24);
    assert!(core::mem::size_of::<Decision>() == 40);
    assert!(core::mem::size_of::<Record<Change>>() == 104);
};
