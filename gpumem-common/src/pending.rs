//! Calls in flight: what an entry program keeps for its return, one
//! `PENDING` entry per thread and API. Each argument shape keeps its own
//! fields ([`CallState`]'s variants); the entry and the return of one
//! shape agree on the variant, and the kernel never reads another's.
use crate::maps::LiveAlloc;

/// Entry/return correlation: the full pid_tgid (a thread) and the API, so
/// that a probed call made inside another probed call does not clobber it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PendingKey {
    pub pid_tgid: u64,
    pub api: u32,
    pub _pad: u32,
}

/// A thread's call to one API, keyed by [`PendingKey`]: between its entry
/// and its return `armed` is 1. The entry stays in the map (disarmed)
/// until the thread exits, so the next call writes it in place instead of
/// inserting (a map update costs several times a lookup).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Pending {
    /// 1 from the entry to the return.
    pub armed: u32,
    pub _pad: u32,
    pub call: CallState,
}

impl Default for Pending {
    fn default() -> Self {
        Self { armed: 0, _pad: 0, call: CallState { raw: [0; CALL_STATE_WORDS] } }
    }
}

/// A thread's call in flight kept in the thread's own task storage
/// (`TASK_CALLS`), where most calls are kept: one at a time, with its API.
/// The `PENDING` entries are for the rest (see the eBPF crate's
/// account/pending.rs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TaskCall {
    /// The API of the call kept.
    pub api: u32,
    /// 1 from the entry to the return.
    pub armed: u32,
    /// The APIs (bit per id) this thread has a `PENDING` entry of that
    /// may still be armed with bytes reserved under limits.
    pub in_hash: u64,
    pub call: CallState,
}

/// What one call keeps between its entry and its return, by shape.
#[repr(C)]
#[derive(Clone, Copy)]
pub union CallState {
    /// Allocations (every shape returning through `alloc_return`).
    pub alloc: AllocCall,
    /// Frees and `cuMemRelease`.
    pub free: FreeCall,
    /// Context-making calls.
    pub context: ContextCall,
    /// `cuCtxSetCurrent`, `cuCtxPushCurrent`.
    pub current: CurrentCall,
    /// Reported calls.
    pub report: ReportCall,
    /// `cuMemMap`, `cuMemUnmap`.
    pub mapping: MappingCall,
    /// Calls that learn a pool's place.
    pub pool: PoolCall,
    /// Memory queries a limit's view may answer.
    pub view: ViewCall,
    /// All of it, to start from zeros.
    pub raw: [u64; CALL_STATE_WORDS],
}

/// [`CallState`]'s size in words: its largest variant's.
pub const CALL_STATE_WORDS: usize = 11;

/// An allocation: admitted (reserved under limits) at its entry, charged
/// at its return if the driver succeeded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocCall {
    /// Where the driver writes the address or handle (0: it is `addr`).
    pub out_ptr: u64,
    /// The address, when the caller supplies it (`cuMemHostRegister`).
    pub addr: u64,
    /// Bytes asked for, as admitted (and reserved) at the entry; for a
    /// pitched allocation width x rows.
    pub size: u64,
    /// `cuMemAllocPitch`: where the driver writes the pitch ...
    pub pitch_ptr: u64,
    /// ... and the rows: the charge is pitch x rows.
    pub rows: u64,
    /// The caller's cgroup at the entry.
    pub cgroup_id: u64,
    /// The limits `size` is reserved under (packed, see `limit_list`).
    pub limit_slots: u64,
    pub device: u32,
    /// Memory kind to charge (from the cookie, or the call's own argument).
    pub kind: u32,
    /// 1 when a limit refused the call at entry: the return charges nothing.
    pub refused: u32,
    pub _pad: u32,
}

/// A free: the entry takes the allocation out of the live map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreeCall {
    /// The address or handle freed.
    pub addr: u64,
    /// The caller's cgroup at the entry, read only when `found` is 0 (for
    /// an untracked free's record); 0 otherwise (see
    /// `families::free::caller_cgroup`).
    pub cgroup_id: u64,
    /// 1 when `live` holds the allocation taken out of the live map (put
    /// back if the free fails).
    pub found: u32,
    pub _pad: u32,
    pub live: LiveAlloc,
}

/// A context-making call: the new context's device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContextCall {
    /// Where the driver writes the context.
    pub out_ptr: u64,
    pub device: u64,
}

/// A call that makes a context current.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CurrentCall {
    /// The context (0: none).
    pub ctx: u64,
}

/// A call reported, never charged.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportCall {
    /// Where the driver writes the handle (0: it is `handle`).
    pub out_ptr: u64,
    pub handle: u64,
    /// The call's size argument, if any.
    pub size: u64,
}

/// A call that returns a pool: where it is, known at the entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCall {
    /// Where the driver writes the pool.
    pub out_ptr: u64,
    pub place: crate::pool::Place,
}

/// `cuMemGetInfo[_v2](*free, *total)`, `cuDeviceTotalMem[_v2](*bytes,
/// dev)` or `nvmlDeviceGetMemoryInfo[_v2](dev, *memory)`: where the
/// library writes its figures, and the device asked about.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewCall {
    /// Where the library writes the free figure (0: no such figure).
    pub free_ptr: u64,
    /// Where it writes the total.
    pub total_ptr: u64,
    /// NVML: where it writes the used figure (0: no such figure), told
    /// total - free when the view changes either.
    pub used_ptr: u64,
    /// NVML v2: where it writes the memory reserved for the driver (0: no
    /// such figure), told 0 when the view changes a figure (the limit's
    /// card has none).
    pub reserved_ptr: u64,
    /// The device (the thread's current context's for `cuMemGetInfo`).
    pub device: u32,
    /// The figures' width in bytes: 8 (`size_t`), 4 in the v1 APIs.
    pub width: u32,
}

/// A mapping made or undone.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingCall {
    /// The mapped virtual address.
    pub va: u64,
    /// The physical memory's handle (`cuMemMap`).
    pub handle: u64,
}

impl CallState {
    /// All zeros.
    pub const ZERO: Self = Self { raw: [0; CALL_STATE_WORDS] };
}

/// `From` each variant, the rest of the union zeros (a variant's value on
/// its own would leave the bytes past it undefined, which older kernels'
/// verifiers refuse to copy into a map).
macro_rules! call_state_from {
    ($($field:ident: $variant:ty),*) => {$(
        impl From<$variant> for CallState {
            #[inline(always)]
            fn from(v: $variant) -> Self {
                let mut s = Self::ZERO;
                s.$field = v;
                s
            }
        }
    )*};
}

call_state_from!(
    alloc: AllocCall,
    free: FreeCall,
    context: ContextCall,
    current: CurrentCall,
    report: ReportCall,
    mapping: MappingCall,
    pool: PoolCall,
    view: ViewCall
);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), integers (and a union of such structs, each within
    // `raw`) only, no padding (sizes asserted below): any bit pattern is
    // valid.
    unsafe impl aya::Pod for super::Pending {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PendingKey {}
}

const _: () = {
    use core::mem::size_of;
    let words = CALL_STATE_WORDS * 8;
    assert!(size_of::<CallState>() == words);
    assert!(size_of::<AllocCall>() <= words && size_of::<AllocCall>() == 72);
    assert!(size_of::<FreeCall>() == words);
    assert!(size_of::<ContextCall>() <= words);
    assert!(size_of::<CurrentCall>() <= words);
    assert!(size_of::<ReportCall>() <= words);
    assert!(size_of::<MappingCall>() <= words);
    assert!(size_of::<PoolCall>() <= words);
    assert!(size_of::<ViewCall>() <= words);
    assert!(size_of::<Pending>() == 8 + words);
    assert!(size_of::<PendingKey>() == 16);
    assert!(size_of::<TaskCall>() == 16 + words);
};
