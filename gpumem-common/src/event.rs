//! The record every probe sends to user space through the ring buffer.

/// What a record reports.
pub mod event_type {
    /// A successful allocation, now charged.
    pub const ALLOC: u32 = 1;
    /// A successful free, now uncharged (size 0 and `FLAG_UNTRACKED` when the
    /// allocation predates the agent).
    pub const FREE: u32 = 2;
    /// An allocation the driver refused (`result` holds its CUresult);
    /// nothing was charged.
    pub const ALLOC_FAILED: u32 = 3;
    /// A process that held memory exited; `size` is what it still held and
    /// has now been uncharged.
    pub const EXIT: u32 = 4;
    /// A call reported but never charged (contexts, pools, imports); the
    /// agent names it from the API (`context`, `pool`, `import`). `addr`
    /// holds the handle, `size` the call's size argument if any.
    pub const CALL: u32 = 5;
    /// A process that held (or held) memory exec'd: like `EXIT`, all it
    /// held is uncharged; the process lives on with a new image.
    pub const EXEC: u32 = 6;
    /// A call would have crossed a hard limit: `addr` is the limit slot,
    /// `size` the request, `proc_total` the limit's usage before it,
    /// `cgroup_total` the hard limit, `result` the action taken
    /// (`limit_action`) and `flags` the signal sent.
    pub const LIMIT: u32 = 7;
    /// Usage went above a soft limit (once per crossing); fields as `LIMIT`
    /// with `cgroup_total` the soft limit.
    pub const LIMIT_SOFT: u32 = 8;

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

/// `device` when the calling thread's current context is not known.
pub const DEVICE_UNKNOWN: u32 = u32::MAX;

/// One record in the ring buffer. 104 bytes, no padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventRecord {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at the record.
    pub ts_ns: u64,
    /// Thread group id (upper 32 bits) and thread id (lower 32 bits).
    pub pid_tgid: u64,
    /// cgroup v2 id of the caller at the call (for `free`: of the allocation).
    pub cgroup_id: u64,
    /// Device address or handle.
    pub addr: u64,
    /// Bytes charged or uncharged (for `alloc_failed`: requested).
    pub size: u64,
    /// The process's total after this record, from the kernel map.
    pub proc_total: u64,
    /// The cgroup's total after this record, from the kernel map.
    pub cgroup_total: u64,
    /// CUresult returned by the driver (0 for `exit`).
    pub result: u32,
    /// One of [`event_type`].
    pub event: u32,
    /// One of [`crate::api::id`].
    pub api: u32,
    /// One of [`crate::api::kind`].
    pub kind: u32,
    /// Device ordinal, or [`DEVICE_UNKNOWN`].
    pub device: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// `comm` of the calling thread, NUL-padded.
    pub comm: [u8; 16],
    /// The process image the record's bytes belong to (its kernel
    /// `ProcUsage::generation`; 0 when none): `alloc` the image it charged,
    /// `free` the image the allocation was charged to, `exit`/`exec` the
    /// image released. The ledger drops an `alloc` or `free` of an image it
    /// has already seen released (a charge racing its killed group's release
    /// can reach the ring buffer after the `exit` record).
    pub generation: u64,
}

const _: () = assert!(core::mem::size_of::<EventRecord>() == 104);

impl EventRecord {
    /// Thread group id (the process id as user space knows it).
    pub const fn tgid(&self) -> u32 {
        (self.pid_tgid >> 32) as u32
    }
    /// Thread id.
    pub const fn tid(&self) -> u32 {
        self.pid_tgid as u32
    }

    /// Decodes a record from ring-buffer bytes; `None` if the length is not
    /// exactly one record (the agent counts those as malformed).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != core::mem::size_of::<Self>() {
            return None;
        }
        // SAFETY: the length matches, every bit pattern is a valid
        // EventRecord (integers and byte arrays only), and read_unaligned
        // has no alignment requirement.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }
}
