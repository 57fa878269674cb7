//! Every kernel map gpumem uses. Sizes come from `gpumem_common::maps`; the
//! agent may override them at load time.
use aya_ebpf::{
    bindings::{BPF_F_MMAPABLE, BPF_F_NO_PREALLOC},
    macros::{btf_map, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray, RingBuf},
};

use crate::base::task_storage::TaskStorage;
use gpumem_common::{
    declare::{
        declaration::{Declaration, EnvConfig},
        declared::Declared,
        read::Reader,
        CAP,
    },
    handover::Handover,
    nvml::{NvmlHandles, NVML_PROC_ENTRIES},
    pool::{ProcPools, POOL_PROC_ENTRIES},
    spilled, stat, CgroupDevice, CgroupLimits, CtxKey, LimitKey, LimitRule, LimitState, LiveAlloc, LiveKey,
    LiveSlot, Pending, PendingKey, ProcUsage, TargetRules, TaskCall, ThreadCtx, CGROUP_ENTRIES,
    CGROUP_LIMITS_ENTRIES, COMM_LIMIT_ENTRIES, CTX_ENTRIES, DECLARED_ENTRIES, EVENTS_BYTES,
    HANDOVER_MARK_ENTRIES, LIMIT_INDEX_ENTRIES, LIVE_ENTRIES, LIVE_SLOTS, MAX_LIMITS, PENDING_ENTRIES,
    POD_ENTRIES, POD_PARENT_ENTRIES, PROC_ENTRIES, TASK_COMM_LEN, THREAD_CTX_ENTRIES, VMM_MAPPING_ENTRIES,
};

/// Records to user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);

/// When this CPU last looked at the ring's backlog (ktime ns), for
/// `WAKEUP_GAP_NS`, or `WAKE_IDLE` while the agent is idle
/// (base/records.rs); the agent writes only the mark and its clearing
/// (gpumem-user's bpf/wake.rs). Each build's own: not carried over.
#[map]
pub static WAKE_AT: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A process's first usage entry as `PROC_USAGE` gets it: all zero but
/// its generation, written before each insert (account/usage.rs). Built
/// in map memory, not on the stack: there its 144 bytes made
/// `alloc_return`'s deepest calls 496 of the verifier's 512 bytes. Each
/// build's own: not carried over.
#[map]
pub static PROC_FRESH: PerCpuArray<ProcUsage> = PerCpuArray::with_max_entries(1, 0);

/// Each thread's call between entry and return, where most calls are
/// kept (account/pending.rs): in the thread's task storage, freed with it.
#[btf_map]
pub static TASK_CALLS: TaskStorage<TaskCall> = TaskStorage::new();

/// Calls between entry and return that `TASK_CALLS` does not keep
/// (allocations that reserved bytes under a limit, a call inside another,
/// a thread whose storage the kernel could not give), one entry per thread
/// and API, kept (disarmed) between calls and removed at the thread's exit (exit.rs).
/// Not LRU: an LRU map evicts live entries well before it is full (seen on
/// 7.x kernels with a few threads: returns without their entry).
#[map]
pub static PENDING: HashMap<PendingKey, Pending> = HashMap::with_max_entries(PENDING_ENTRIES, 0);

/// Live allocations but VMM handles, in an open-addressed table
/// (account/live.rs); mmapable, so the agent reads it without a system
/// call per slot.
#[map]
pub static LIVE_TABLE: Array<LiveSlot> = Array::with_max_entries(LIVE_SLOTS, BPF_F_MMAPABLE);

/// Live allocations the table does not keep: (tgid, namespace, address)
/// -> size, kind, device, cgroup (account/live.rs).
#[map]
pub static LIVE: HashMap<LiveKey, LiveAlloc> = HashMap::with_max_entries(LIVE_ENTRIES, BPF_F_NO_PREALLOC);

/// Whether `LIVE` may hold an allocation that is not a VMM handle (one
/// whose table slots were taken, or an earlier build's): the table's
/// readers look there too only then (`gpumem_common::spilled`).
#[map]
pub static LIVE_SPILLED: Array<u64> = Array::with_max_entries(spilled::ENTRIES, 0);

/// Bytes held per process (tgid), with its per-cgroup split.
#[map]
pub static PROC_USAGE: HashMap<u32, ProcUsage> = HashMap::with_max_entries(PROC_ENTRIES, 0);

/// Processes with a thread that called the driver (see `Pending`): their
/// threads' exits remove the threads' `PENDING` entries.
#[map]
pub static CALLERS: LruHashMap<u32, u8> = LruHashMap::with_max_entries(PROC_ENTRIES, 0);

/// Thread groups whose leader exited (the value is 1; removed at exec):
/// their later threads' exits still look for calls of theirs in `PENDING`
/// to remove, should the group have left the `CALLERS` LRU map. (Builds
/// before 2026-12-02 kept the leader's exit time here, for late threads'
/// releases; nothing reads the value.)
#[map]
pub static LEADER_GONE: LruHashMap<u32, u64> = LruHashMap::with_max_entries(PROC_ENTRIES, 0);

/// Bytes held per cgroup v2 id.
#[map]
pub static CGROUP_USAGE: HashMap<u64, u64> = HashMap::with_max_entries(CGROUP_ENTRIES, 0);

/// Always empty: every uprobe program's tail call into it falls through,
/// and having a tail call keeps the program on its task's stack (see
/// base/task_stack.rs).
#[map]
pub static TASK_STACK: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Per-CPU counters, indexed by `gpumem_common::stat`.
#[map]
pub static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Each thread's current context (by full pid_tgid), where task storage
/// is not used, and as builds before `TASK_CTX` kept it (a takeover from
/// one reads it for threads that set their context before). LRU: exited
/// threads age out.
#[map]
pub static THREAD_CTX: LruHashMap<u64, u64> = LruHashMap::with_max_entries(THREAD_CTX_ENTRIES, 0);

/// The device of each known context.
#[map]
pub static CTX_DEVICE: LruHashMap<CtxKey, u32> = LruHashMap::with_max_entries(CTX_ENTRIES, 0);

/// Each thread's current context and its device, in the thread's task
/// storage (device.rs): one get where `THREAD_CTX` and `CTX_DEVICE` took
/// two lookups at every allocation.
#[btf_map]
pub static TASK_CTX: TaskStorage<ThreadCtx> = TaskStorage::new();

/// Entry 0: bumped after each context's device is learned (`CTX_DEVICE`
/// written), so a device kept in `TASK_CTX` from before is looked up again.
#[map]
pub static CTX_DEVICE_GENERATION: Array<u64> = Array::with_max_entries(1, 0);

/// VMM mappings: (tgid, mapped address) -> the handle mapped there.
#[map]
pub static VMM_MAPPINGS: HashMap<LiveKey, u64> =
    HashMap::with_max_entries(VMM_MAPPING_ENTRIES, BPF_F_NO_PREALLOC);

/// Limit rules, by slot (written by the agent).
#[map]
pub static LIMITS: Array<LimitRule> = Array::with_max_entries(MAX_LIMITS, 0);

/// Usage under each limit slot (counted here).
#[map]
pub static LIMIT_STATE: Array<LimitState> = Array::with_max_entries(MAX_LIMITS, 0);

/// What each limit's target held before the limit was set at run time,
/// still live (written by the agent, see gpumem-user's carried.rs): counted
/// with the usage.
#[map]
pub static LIMIT_BASE: Array<u64> = Array::with_max_entries(MAX_LIMITS, 0);

/// Which slots limit a process (tgid) or a cgroup (id), for each device.
#[map]
pub static LIMIT_INDEX: HashMap<LimitKey, TargetRules> = HashMap::with_max_entries(LIMIT_INDEX_ENTRIES, 0);

/// The limits each cgroup's ancestors push for a call on a device, as last
/// walked in `LIMIT_INDEX` (limits.rs): one lookup in place of a helper
/// call and a lookup per level (a pod's container is 4 or 5 levels deep).
#[map]
pub static CGROUP_LIMITS: LruHashMap<CgroupDevice, CgroupLimits> =
    LruHashMap::with_max_entries(CGROUP_LIMITS_ENTRIES, 0);

/// Entry 0: bumped by the agent after each change of `LIMIT_INDEX`, so a
/// walk kept in `CGROUP_LIMITS` from before it is walked again.
#[map]
pub static LIMIT_INDEX_GENERATION: Array<u64> = Array::with_max_entries(1, 0);

/// Entry 0 (the agent's): the kinds of target some rule in force has
/// (`gpumem_common::limits_in_force`); entry 1 (the kernel's): 1 once a
/// process declared limits. Both zero skips the whole limit path at every
/// allocation.
#[map]
pub static LIMITS_IN_FORCE: Array<u32> = Array::with_max_entries(2, 0);

/// The `kubepods` cgroups and their QoS cgroups (ids), written by the
/// agent while rules on pods are in force: a pod's cgroup is the one
/// below the deepest of them (families/pods.rs).
#[map]
pub static POD_PARENTS: HashMap<u64, u32> = HashMap::with_max_entries(POD_PARENT_ENTRIES, 0);

/// Pods (cgroup ids) whose rules the agent has made, or found none for.
#[map]
pub static POD_SEEN: HashMap<u64, u32> = HashMap::with_max_entries(POD_ENTRIES, 0);

/// Processes held at exec (tgid -> their pod's cgroup id), until the
/// agent lets them go on.
#[map]
pub static POD_HELD: HashMap<u32, u64> = HashMap::with_max_entries(POD_ENTRIES, 0);

/// Whether rules on pods are in force, and the agent's heartbeat (see
/// `gpumem_common::pod_hold`).
#[map]
pub static POD_HOLD: Array<u64> = Array::with_max_entries(2, 0);

/// The limits each process declared in its environment (tgid ->
/// `Declared`): read at exec (families/declare.rs), copied to a forked
/// child, removed at exit and exec. Allocated as processes declare.
#[map]
pub static DECLARED: HashMap<u32, Declared> = HashMap::with_max_entries(DECLARED_ENTRIES, BPF_F_NO_PREALLOC);

/// Entry 0: which variables the agent honours, its defaults and cap for
/// them (written by the agent).
#[map]
pub static ENV_CONFIG: Array<EnvConfig> = Array::with_max_entries(1, 0);

/// Entry 0 is always 0, but the verifier cannot know it: ORed into a
/// value the programs build from constants (`base::opaque`), it keeps the
/// verifier from walking the rest of a program once per such constant.
#[map]
pub static OPAQUE: Array<u64> = Array::with_max_entries(1, 0);

/// Environment strings read at one exec, at most.
pub const MAX_MATCHES: usize = 32;

/// Where the exec program reads a new image's environment, one CPU's
/// (families/declare.rs): too large for the stack, and kept between the
/// `bpf_loop` callbacks that feed it.
#[repr(C)]
pub struct DeclareScratch {
    /// The new image's `envp`.
    pub envp: u64,
    /// Strings that begin as a declaring variable's name does.
    pub ptrs: [u64; MAX_MATCHES],
    pub matches: u32,
    /// 1 once the scan reached the end of `envp`.
    pub scanned: u32,
    /// The string being read, and its value's parsers.
    pub buf: [u8; CAP],
    pub reader: Reader,
    pub decl: Declaration,
    /// What the exec keeps for the process.
    pub kept: Declared,
    /// What a fork copies to its child (the fork program's own: on 7.x a
    /// fork's program can run while an exec's is preempted on its CPU).
    pub forked: Declared,
}

#[map]
pub static DECLARE_SCRATCH: PerCpuArray<DeclareScratch> = PerCpuArray::with_max_entries(1, 0);

/// Which slots limit processes by comm (NUL-padded), as in `LIMIT_INDEX`.
#[map]
pub static COMM_LIMITS: HashMap<[u8; TASK_COMM_LEN], TargetRules> =
    HashMap::with_max_entries(COMM_LIMIT_ENTRIES, 0);

/// Each process's memory pools and where their allocations go (tgid ->
/// pools), learned from `cuMemPoolCreate` and the pool getters, removed at
/// the process's exit or exec. Allocated as processes use pools.
#[map]
pub static PROC_POOLS: HashMap<u32, ProcPools> =
    HashMap::with_max_entries(POOL_PROC_ENTRIES, BPF_F_NO_PREALLOC);

/// Each process's NVML device handles (tgid -> handles by device index),
/// learned from `nvmlDeviceGetHandleByIndex[_v2]`, removed at the
/// process's exit or exec. Allocated as processes use NVML.
#[map]
pub static PROC_NVML: HashMap<u32, NvmlHandles> =
    HashMap::with_max_entries(NVML_PROC_ENTRIES, BPF_F_NO_PREALLOC);

/// Entry 0: which build's programs run (`gpumem_common::handover`). Its
/// layout never changes: every build reads it to take over from another.
#[map]
pub static HANDOVER: Array<Handover> = Array::with_max_entries(1, 0);

/// During a takeover, the site of the hit a new build's uprobe program
/// stood by for, by thread (pid_tgid): the old build's program runs it.
#[map]
pub static HANDOVER_MARKS: HashMap<u64, u64> =
    HashMap::with_max_entries(HANDOVER_MARK_ENTRIES, BPF_F_NO_PREALLOC);
