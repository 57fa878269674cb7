//! The calling thread, got once per program run: its task pointer, and
//! what the programs read of it (pid and tgid, cgroup, comm) in place
//! from the task where the agent found the fields in the kernel's BTF.
//!
//! On a host whose kernel returns from every function through a
//! mitigation thunk (AMD's SRSO "safe RET", retbleed), each helper call
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

/// The current thread's task (trusted by the verifier), or null where
/// task storage is not used.
#[derive(Clone, Copy)]
pub struct Task(*const u8);

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
            return Self(core::ptr::null());
        }
        // SAFETY: plain helper call; the pointer is the kernel's own.
        Self(unsafe { bpf_get_current_task_btf() }.cast::<u8>().cast_const())
    }

    /// The task pointer, for the task-storage helpers (null where task
    /// storage is not used: they are not called then).
    #[inline(always)]
    pub fn ptr(self) -> *const u8 {
        self.0
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
        let (pid, tgid) = (set(&TASK_PID_OFFSET), set(&TASK_TGID_OFFSET));
        if pid == 0 || tgid == 0 {
            return bpf_get_current_pid_tgid();
        }
        // SAFETY: the agent sets the offsets only where task storage is
        // on (the task pointer is the kernel's), from the BTF's
        // `task_struct`, whose `pid` and `tgid` are 4-byte `pid_t`s.
        let (pid, tgid) = unsafe { (Self::field::<u32>(self.0, pid), Self::field::<u32>(self.0, tgid)) };
        (u64::from(tgid) << 32) | u64::from(pid)
    }

    /// The tgid.
    #[inline(always)]
    pub fn tgid(self) -> u32 {
        (self.pid_tgid() >> 32) as u32
    }

    /// `bpf_get_current_cgroup_id()`: the thread's cgroup on the v2
    /// hierarchy.
    #[inline(always)]
    pub fn cgroup_id(self) -> u64 {
        let path = [
            set(&TASK_CGROUP_PATH[0]),
            set(&TASK_CGROUP_PATH[1]),
            set(&TASK_CGROUP_PATH[2]),
            set(&TASK_CGROUP_PATH[3]),
        ];
        if path[0] == 0 {
            // SAFETY: plain helper call.
            return unsafe { bpf_get_current_cgroup_id() };
        }
        // SAFETY: as in `pid_tgid`; each offset is the field of the type
        // the previous load leads to, a pointer but the last (a u64). The
        // programs run inside an RCU read-side section, which keeps the
        // task's css_set and what it points to alive.
        unsafe {
            let css_set = Self::field::<*const u8>(self.0, path[0]);
            let cgroup = Self::field::<*const u8>(css_set, path[1]);
            let kernfs_node = Self::field::<*const u8>(cgroup, path[2]);
            Self::field::<u64>(kernfs_node, path[3])
        }
    }
}
