//! Keys and values of the kernel maps, with their names and sizes.
//!
//! The kernel maps are the source of truth for usage: the agent's ledger
//! mirrors them from the event stream and is checked against them. The
//! limit maps' keys and values are `limit_maps`' (re-exported here).

pub use crate::limit_maps::*;

/// Map names, as the agent looks them up in the loaded object.
pub mod map_name {
    pub const EVENTS: &str = "EVENTS";
    pub const PENDING: &str = "PENDING";
    pub const LIVE: &str = "LIVE";
    pub const LIVE_TABLE: &str = "LIVE_TABLE";
    pub const LIVE_SPILLED: &str = "LIVE_SPILLED";
    pub const PROC_USAGE: &str = "PROC_USAGE";
    pub const CGROUP_USAGE: &str = "CGROUP_USAGE";
    pub const STATS: &str = "STATS";
    pub const THREAD_CTX: &str = "THREAD_CTX";
    pub const VMM_MAPPINGS: &str = "VMM_MAPPINGS";
    pub const LIMITS: &str = "LIMITS";
    pub const LIMIT_STATE: &str = "LIMIT_STATE";
    pub const LIMIT_BASE: &str = "LIMIT_BASE";
    pub const LIMIT_INDEX: &str = "LIMIT_INDEX";
    pub const COMM_LIMITS: &str = "COMM_LIMITS";
    pub const LIMITS_IN_FORCE: &str = "LIMITS_IN_FORCE";
    pub const LIMIT_INDEX_GENERATION: &str = "LIMIT_INDEX_GENERATION";
    pub const TASK_CTX: &str = "TASK_CTX";
    pub const CTX_DEVICE_GENERATION: &str = "CTX_DEVICE_GENERATION";
    pub const CTX_DEVICE: &str = "CTX_DEVICE";
    pub const HANDOVER: &str = "HANDOVER";
    pub const HANDOVER_MARKS: &str = "HANDOVER_MARKS";
    pub const DECLARED: &str = "DECLARED";
    pub const ENV_CONFIG: &str = "ENV_CONFIG";
    pub const POD_PARENTS: &str = "POD_PARENTS";
    pub const POD_SEEN: &str = "POD_SEEN";
    pub const POD_HELD: &str = "POD_HELD";
    pub const POD_HOLD: &str = "POD_HOLD";
    pub const WAKE_AT: &str = "WAKE_AT";
}

/// Default ring buffer size in bytes (a power-of-two multiple of the page
/// size; `gpumem run --ring-buffer` sets another): 4 MiB holds 37,449
/// records, 80 ms of the most one 2-core host produced (`cargo xtask
/// bench`, saturation), while the agent is woken at 256 KiB of backlog.
pub const EVENTS_BYTES: u32 = 4 << 20;
/// Bytes waiting in the ring buffer above which a record wakes the agent;
/// below, records are submitted quietly and the agent drains on a timer.
pub const WAKEUP_BACKLOG: u32 = 256 << 10;
/// The least time between two looks of one CPU at the ring's backlog,
/// and so between two of its records that wake the agent (ns): a wake-up
/// is a self-interrupt (`irq_work`, an APIC write, a VM exit under a
/// hypervisor), and while the agent catches up every record above the
/// backlog asked for one, 125 ns a pair in the bench's loop. At
/// the most one 2-core host produced (about 110 MB of records a second) a
/// millisecond fills 110 KiB of the ring's 4 MiB.
pub const WAKEUP_GAP_NS: u64 = 1_000_000;
/// A CPU's `WAKE_AT` value while the agent is idle (it read no record for
/// a second and stopped its drain timer): the CPU's next record wakes it
/// (the first look at the backlog after the mark, as the gap from any
/// time to it is more than `WAKEUP_GAP_NS`), and that look's time
/// replaces the mark. Written on every CPU by the agent alone.
pub const WAKE_IDLE: u64 = u64::MAX;
/// Calls in flight (between entry and return), all threads on the host.
pub const PENDING_ENTRIES: u32 = 16384;
/// Live allocations tracked at once, all processes on the host.
pub const LIVE_ENTRIES: u32 = 1 << 20;
/// Processes holding memory at once.
pub const PROC_ENTRIES: u32 = 16384;
/// cgroups holding memory at once.
pub const CGROUP_ENTRIES: u32 = 16384;
/// VMM mappings tracked at once (address -> handle).
pub const VMM_MAPPING_ENTRIES: u32 = 1 << 16;
/// Threads whose current context is tracked.
pub const THREAD_CTX_ENTRIES: u32 = 65536;
/// Threads marked at once during a takeover (see `handover`).
pub const HANDOVER_MARK_ENTRIES: u32 = 65536;
/// Contexts whose device is known, all processes.
pub const CTX_ENTRIES: u32 = 16384;
/// How many distinct cgroups one process's charges are remembered for, so
/// that its exit uncharges each of them exactly.
pub const PROC_CGROUP_SLOTS: usize = 4;
/// Limit rules at once (slots of the `LIMITS` array): the operator's, the
/// ones the agent makes for containers that declare limits (a per-device
/// rule takes a slot and one a device, see `DEVICE_EACH`). Slots of rules
/// gone and counting nothing are used again.
pub const MAX_LIMITS: u32 = 2046;
/// Limits applied to one call: the process's, the comm's, then the nearest
/// limited cgroups from the caller's up (a live allocation records them
/// packed, one byte each, slot + 1).
pub const LIMITS_PER_CALL: usize = 4;
/// Limits one process's charges can be remembered for (for its exit).
pub const PROC_LIMIT_SLOTS: usize = 4;
/// Limit targets (processes and cgroups) indexed at once.
pub const LIMIT_INDEX_ENTRIES: u32 = 1024;
/// Comms with a limit at once.
pub const COMM_LIMIT_ENTRIES: u32 = 256;
/// (Cgroup, device) pairs whose ancestors' limits the kernel keeps walked
/// (`CgroupLimits`; least recently used forgotten). An LRU map keeps up to
/// 128 free elements per CPU aside, so it evicts before it is full on a
/// host with many CPUs: sized for 128.
pub const CGROUP_LIMITS_ENTRIES: u32 = 16384;

/// cgroup ancestor levels searched for limits (0 is the root).
pub const MAX_CGROUP_DEPTH: u32 = 12;

/// `cgroup_slot` when no slot was free.
pub const NO_SLOT: u32 = u32::MAX;

/// Indices into the per-CPU `STATS` array.
pub mod stat {
    /// Records that did not fit in the ring buffer.
    pub const RINGBUF_DROPS: u32 = 0;
    /// A map insert failed (map full): see the agent's report for which
    /// accounting is incomplete.
    pub const MAP_FULL: u32 = 1;
    /// Returns with no matching entry (entry probe missed or evicted).
    pub const UNMATCHED_RETURNS: u32 = 2;
    /// Charges beyond `PROC_CGROUP_SLOTS` cgroups for one process.
    pub const CGROUP_SLOTS_FULL: u32 = 3;
    /// The driver reported success but the returned pointer could not be
    /// read: the allocation is reported but not charged.
    pub const OUT_PTR_UNREADABLE: u32 = 4;
    /// Memory queries answered with a limit's view (see `limit_view`).
    pub const VIEW_REWRITES: u32 = 5;
    pub const COUNT: u32 = 6;
}

/// Address namespaces in the live map: device pointers, host pointers and
/// opaque handles can hold equal numbers.
pub mod ns {
    pub const DEVICE_PTR: u32 = 0;
    pub const HOST_PTR: u32 = 1;
    pub const ARRAY: u32 = 2;
    pub const VMM_HANDLE: u32 = 3;
    /// `VMM_MAPPINGS` keys: mapped virtual addresses.
    pub const VMM_MAPPING: u32 = 4;
    /// Not a live key's: `CGROUP_USAGE`'s keys (cgroup ids), where the
    /// agent has the kernel forget a removed cgroup's total
    /// (`forget_dead`).
    pub const CGROUP: u32 = 5;

    /// The namespace an allocation of `kind` lives in.
    pub const fn for_kind(kind: u32) -> u32 {
        match kind {
            crate::kind::HOST => HOST_PTR,
            crate::kind::ARRAY => ARRAY,
            crate::kind::VMM => VMM_HANDLE,
            _ => DEVICE_PTR,
        }
    }
}

/// A live allocation, keyed by [`LiveKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveAlloc {
    pub size: u64,
    pub cgroup_id: u64,
    /// VMM handles: how many mappings use it (`cuMemMap` minus `cuMemUnmap`).
    pub maps: u64,
    pub kind: u32,
    pub device: u32,
    /// Index into the owner's [`ProcUsage`] cgroup slots, or [`NO_SLOT`].
    pub cgroup_slot: u32,
    pub api: u32,
    /// VMM handles: 1 once `cuMemRelease` released the last reference
    /// while still mapped; the charge goes at the last unmap, as the driver
    /// frees it then.
    pub released: u32,
    /// VMM handles: references `cuMemRetainAllocationHandle` added, each
    /// given back by a `cuMemRelease` of its own before the last one.
    pub retained: u32,
    /// The owner's [`ProcUsage::generation`] when allocated. An entry of an
    /// older generation belongs to an image that exited or exec'd, whose
    /// charges are already gone: it is dropped, never uncharged.
    pub generation: u64,
    /// The `LIMITS` slots this allocation is charged to: byte `i` is slot
    /// + 1 (0: none), `LIMITS_PER_CALL` bytes.
    pub limit_slots: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LiveKey {
    pub tgid: u32,
    /// One of [`ns`].
    pub ns: u32,
    pub addr: u64,
}

impl LiveKey {
    /// The (namespace, address) the agent's records give allocation `a`
    /// at this key: the namespace of its kind. The kernel keys an
    /// allocation by its API's namespace (a pool's allocation is a device
    /// pointer, a `cuMemCreate` a handle, whatever the memory's location),
    /// and the records by the kind the call charged (host, for a pool or a
    /// `cuMemCreate` located on the host), so an agent reading the kernel's
    /// live allocations names each as its records will.
    pub const fn as_recorded(&self, a: &LiveAlloc) -> (u32, u64) {
        (ns::for_kind(a.kind), self.addr)
    }
}

/// A context of one process (context handles are per-process pointers).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtxKey {
    pub tgid: u32,
    pub _pad: u32,
    pub ctx: u64,
}

/// A thread's current context, in its task storage (`TASK_CTX`), and the
/// device that context was found on (`CTX_DEVICE`), kept while no context's
/// device was learned since (`CTX_DEVICE_GENERATION`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCtx {
    /// The context (0: none, or one gpumem does not track).
    pub ctx: u64,
    /// `CTX_DEVICE_GENERATION` + 1 when `device` was found (0: not yet).
    pub generation: u64,
    pub device: u32,
    /// 1 once this build's programs set the thread's context here (0: read
    /// `THREAD_CTX`, which builds before it kept).
    pub known: u32,
}

/// Usage of one process (keyed by tgid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcUsage {
    /// Bytes held in total.
    pub bytes: u64,
    /// When this record was made (ns): tells this process image's live
    /// entries from those of an earlier image with the same tgid. Its
    /// release sets [`ProcUsage::RELEASED`]; a released entry holds
    /// nothing and stays until no thread of the process can still be in a
    /// program (gpumem-ebpf's families/exit.rs).
    pub generation: u64,
    /// The cgroups this process charged (0 = free slot) ...
    pub cgroup_ids: [u64; PROC_CGROUP_SLOTS],
    /// ... and how much it holds in each.
    pub cgroup_bytes: [u64; PROC_CGROUP_SLOTS],
    /// The limit slots (slot + 1; 0 = free) this process's charges count
    /// against ...
    pub limit_slots: [u64; PROC_LIMIT_SLOTS],
    /// ... and how much it holds under each.
    pub limit_bytes: [u64; PROC_LIMIT_SLOTS],
}

impl ProcUsage {
    /// Set in a released process's `generation`.
    pub const RELEASED: u64 = 1 << 63;

    /// Whether the process's release has begun (it holds nothing).
    pub fn released(&self) -> bool {
        self.generation & Self::RELEASED != 0
    }
}

/// The `kubepods` cgroups and their QoS cgroups (`POD_PARENTS`), at once.
pub const POD_PARENT_ENTRIES: u32 = 64;
/// Pods the agent has seen (`POD_SEEN`), and processes held at exec
/// (`POD_HELD`), at once.
pub const POD_ENTRIES: u32 = 4096;

/// `POD_HOLD`: entry [`pod_hold::ARMED`] is 1 while rules on pods are in
/// force; entry [`pod_hold::BEAT`] the agent's latest heartbeat
/// (CLOCK_MONOTONIC ns). The kernel holds a process at exec only while the
/// heartbeat is younger than [`pod_hold::FRESH_NS`]: an agent gone stops
/// no one.
pub mod pod_hold {
    pub const ARMED: u32 = 0;
    pub const BEAT: u32 = 1;
    pub const FRESH_NS: u64 = 10_000_000_000;
}

/// Processes with declared limits at once (`DECLARED`).
pub const DECLARED_ENTRIES: u32 = 16384;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::LiveAlloc {}
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::LiveKey {}
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::ProcUsage {}
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::CtxKey {}
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::LimitKey {}
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::LimitRule {}
    // SAFETY: repr(C), integers only, no padding (sizes asserted below).
    unsafe impl aya::Pod for super::LimitState {}
    // SAFETY: plain-old-data, repr(C), no padding.
    unsafe impl aya::Pod for super::TargetRules {}
}

const _: () = {
    assert!(core::mem::size_of::<LiveAlloc>() == 64);
    assert!(core::mem::size_of::<LimitKey>() == 16);
    assert!(core::mem::size_of::<LimitRule>() == 40);
    assert!(core::mem::size_of::<LimitState>() == 16);
    assert!(core::mem::size_of::<LiveKey>() == 16);
    assert!(core::mem::size_of::<CtxKey>() == 16);
    assert!(core::mem::size_of::<ProcUsage>() == 16 + 16 * PROC_CGROUP_SLOTS + 16 * PROC_LIMIT_SLOTS);
};
