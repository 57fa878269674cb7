//! The calling thread, got once per program run: its task pointer, and
//! what the programs read of it in place from the task where the agent
//! found the fields in the kernel's BTF: pid and tgid, at an allocation's
//! entry the cgroup, and in every record the comm (`comm.rs`).
//!
//! On a host whose kernel returns from every function through a
//! mitigation thunk (AMD's SRSO "safe RET"), each helper call
//! costs its return's misprediction on top of its body: the pid, the
//! cgroup (whose helper takes and drops the RCU read lock, two calls more)
//! and each task-storage get's task pointer were helper calls a pair;
//! read here they are loads the verifier checks against the task's BTF
//! and makes fault-safe. Where task storage is off (no BTF, or
//! `GPUMEM_TASK_CALLS=off`, which runs this fallback in the tests) the
//! agent sets no offset and the helpers answer.
use aya_ebpf::helpers::{
    bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, generated::bpf_get_current_task_btf,
};

/// 1 where task storage may be used, and the task read in place: set by
/// the agent at load where the kernel has BTF (the storage's helpers and
/// the task's loads need its task type), unless `GPUMEM_TASK_CALLS=off`.
/// While 0 the verifier proves the task-storage code dead and never
/// checks it.
#[no_mangle]
static TASK_CALLS_ON: u8 = 0;

/// Whether task storage may be used (see `TASK_CALLS_ON`).
#[inline(always)]
pub fn on() -> bool {
    // SAFETY: a read of read-only data the loader set.
    let on = unsafe { core::ptr::read_volatile(&TASK_CALLS_ON) };
    on != 0
}

/// Byte offsets in the running kernel, set by the agent at load from
/// `/sys/kernel/btf/vmlinux` (`gpumem-user/src/bpf/btf_offset.rs`); 0
/// where it found none or task storage is off. Read-only data: the
/// verifier knows each value, checks each load against the BTF type at
/// that offset, and never walks the other path.
/// `task_struct.pid` and `task_struct.tgid`.
#[no_mangle]
static TASK_PID_OFFSET: u32 = 0;
#[no_mangle]
static TASK_TGID_OFFSET: u32 = 0;
/// The walk `bpf_get_current_cgroup_id` makes, field by field:
/// `task_struct.cgroups` (the task's `css_set`), `css_set.dfl_cgrp` (its
/// cgroup on the v2 hierarchy), `cgroup.kn` (that cgroup's kernfs node),
/// `kernfs_node.id` (the id, the directory's inode number): all four or
/// none.
#[no_mangle]
static TASK_CGROUP_PATH: [u32; 4] = [0; 4];

/// The current thread's task (trusted by the verifier; null where task
/// storage is not used) and its pid_tgid, read with it: read where it is
/// used, each load from the task is a walk of its BTF type for the
/// verifier on every path through the program that reaches it
/// (`alloc_return`'s verification took about 15 ms longer).
#[derive(Clone, Copy)]
pub struct Task {
    ptr: *const u8,
    pid_tgid: u64,
}

/// Reads the read-only value the loader set at `v`.
#[inline(always)]
fn set(v: &u32) -> usize {
    // SAFETY: a read of read-only data the loader set.
    unsafe { core::ptr::read_volatile(v) as usize }
}

impl Task {
    /// The calling thread: one helper call, for the whole run.
    #[inline(always)]
    pub fn current() -> Self {
        if !on() {
            return Self { ptr: core::ptr::null(), pid_tgid: bpf_get_current_pid_tgid() };
        }
        // SAFETY: plain helper call; the pointer is the kernel's own.
        let ptr = unsafe { bpf_get_current_task_btf() }.cast::<u8>().cast_const();
        Self { ptr, pid_tgid: read_pid_tgid(ptr) }
    }

    /// The task pointer, for the task-storage helpers (null where task
    /// storage is not used: they are not called then).
    #[inline(always)]
    pub fn ptr(self) -> *const u8 {
        self.ptr
    }

    /// Reads the `T` at byte `offset` of the task (or of a structure the
    /// task leads to, `from`).
    ///
    /// # Safety
    /// `from` is a pointer the verifier types from the kernel's BTF, and
    /// `offset` a field of that type holding a `T`.
    #[inline(always)]
    unsafe fn field<T>(from: *const u8, offset: usize) -> T {
        // SAFETY: the caller's promise; the verifier checks the load
        // against the BTF and makes it fault-safe.
        unsafe { core::ptr::read_volatile(from.add(offset).cast::<T>()) }
    }

    /// `bpf_get_current_pid_tgid()`: the tgid above, the thread's pid
    /// below.
    #[inline(always)]
    pub fn pid_tgid(self) -> u64 {
        self.pid_tgid
    }

    /// The tgid.
    #[inline(always)]
    pub fn tgid(self) -> u32 {
        (self.pid_tgid() >> 32) as u32
    }

    /// `bpf_get_current_cgroup_id()`, the thread's cgroup on the v2
    /// hierarchy, through the helper: for the paths that seldom run.
    #[inline(always)]
    pub fn cgroup_id(self) -> u64 {
        // SAFETY: plain helper call.
        unsafe { bpf_get_current_cgroup_id() }
    }

    /// [`Self::cgroup_id`] read in place, for the one path that reads it at
    /// every call (an allocation's entry). Each pointer loaded on the walk
    /// costs the verifier a search of the kernel's BTF (about 4 ms a
    /// program on the bench's host: in every program that read it,
    /// start-up took 30 ms longer), so the rarer paths ask the helper.
    #[inline(always)]
    pub fn cgroup_id_in_place(self) -> u64 {
        let path = [
            set(&TASK_CGROUP_PATH[0]),
            set(&TASK_CGROUP_PATH[1]),
            set(&TASK_CGROUP_PATH[2]),
            set(&TASK_CGROUP_PATH[3]),
        ];
        if path[0] == 0 {
            return self.cgroup_id();
        }
        // SAFETY: as in `read_pid_tgid`; each offset is the field of the
        // type the previous load leads to, a pointer but the last (a u64).
        // The programs run inside an RCU read-side section, which keeps
        // the task's css_set and what it points to alive.
        unsafe {
            let css_set = Self::field::<*const u8>(self.ptr, path[0]);
            let cgroup = Self::field::<*const u8>(css_set, path[1]);
            let kernfs_node = Self::field::<*const u8>(cgroup, path[2]);
            Self::field::<u64>(kernfs_node, path[3])
        }
    }
}

/// `bpf_get_current_pid_tgid()` of the task at `task` (the kernel's own
/// pointer to the current task), read in place where the agent found the
/// fields.
#[inline(always)]
fn read_pid_tgid(task: *const u8) -> u64 {
    let (pid, tgid) = (set(&TASK_PID_OFFSET), set(&TASK_TGID_OFFSET));
    if pid == 0 || tgid == 0 {
        return bpf_get_current_pid_tgid();
    }
    // SAFETY: the agent sets the offsets only where task storage is on
    // (`task` is the kernel's), from the BTF's `task_struct`, whose `pid`
    // and `tgid` are 4-byte `pid_t`s.
    let (pid, tgid) = unsafe { (Task::field::<u32>(task, pid), Task::field::<u32>(task, tgid)) };
    (u64::from(tgid) << 32) | u64::from(pid)
}
