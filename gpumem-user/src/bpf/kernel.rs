//! Reading the kernel's usage maps and counters: the source of truth the
//! agent's ledger is checked against.
use std::{
    collections::HashMap,
    os::fd::{AsFd, AsRawFd},
};

use aya::{
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray},
    programs::ProgramFd,
};
use gpumem_common::{map_name, stat, ProcUsage, Running, GUARDED_PROGRAMS};

use super::{BpfError, Tracer};

/// Handles on the kernel's usage maps.
pub struct KernelMaps {
    procs: BpfHashMap<MapData, u32, ProcUsage>,
    cgroups: BpfHashMap<MapData, u64, u64>,
    stats: PerCpuArray<MapData, u64>,
    /// Each uprobe program's per-CPU run guard (gpumem-ebpf's exclusive.rs).
    running: PerCpuArray<MapData, Running>,
    /// Every loaded program, for the runs the kernel skipped.
    programs: Vec<ProgramFd>,
    release_gone: Option<ProgramFd>,
}

/// Kernel counters, summed over CPUs (see `gpumem_common::stat`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub ringbuf_drops: u64,
    pub map_full: u64,
    pub unmatched_returns: u64,
    pub cgroup_slots_full: u64,
    pub out_ptr_unreadable: u64,
    /// Runs of gpumem's programs skipped, by the kernel (`recursion_misses`:
    /// another run was under way on that CPU) or by the programs' own
    /// per-CPU guard (a run of the same program preempted on that CPU, see
    /// gpumem-ebpf's exclusive.rs): each one a call gpumem did not see
    /// whole.
    pub skipped_runs: u64,
}

impl KernelMaps {
    pub fn take(tracer: &mut Tracer) -> Result<Self, BpfError> {
        Ok(Self {
            procs: tracer.take_map(map_name::PROC_USAGE)?,
            cgroups: tracer.take_map(map_name::CGROUP_USAGE)?,
            stats: tracer.take_map(map_name::STATS)?,
            running: tracer.take_map(map_name::RUNNING)?,
            programs: tracer.program_fds(),
            release_gone: tracer.release_gone_fd(),
        })
    }

    /// Releases, in the kernel, what process `tgid` held, as its exit
    /// would have (an `exit` record follows): for a process that is gone
    /// while the kernel still counts memory for it. False if the kernel
    /// refused to run the program.
    pub fn release_gone(&self, tgid: u32) -> bool {
        use aya_obj::generated::{bpf_attr, bpf_cmd};
        let Some(fd) = &self.release_gone else { return false };
        let mut args = [tgid as u64];
        // SAFETY: plain-old-data kernel struct; all-zero is its initial state.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.test.prog_fd = fd.as_fd().as_raw_fd() as u32;
        attr.test.ctx_in = args.as_mut_ptr() as u64;
        attr.test.ctx_size_in = std::mem::size_of_val(&args) as u32;
        // SAFETY: the kernel reads ctx_size_in bytes of `args`.
        unsafe { bpf(bpf_cmd::BPF_PROG_TEST_RUN, &mut attr) }
    }

    /// Bytes held per process, as the kernel counts them.
    pub fn processes(&self) -> HashMap<u32, u64> {
        self.procs.iter().flatten().map(|(tgid, u)| (tgid, u.bytes)).collect()
    }

    /// Bytes held per cgroup id, as the kernel counts them.
    pub fn cgroups(&self) -> HashMap<u64, u64> {
        self.cgroups.iter().flatten().collect()
    }

    /// Runs the programs' own guards skipped, all programs and CPUs.
    fn guard_skips(&self) -> impl Iterator<Item = u64> + '_ {
        (0..GUARDED_PROGRAMS)
            .filter_map(|i| self.running.get(&i, 0).ok())
            .flat_map(|v| v.to_vec())
            .map(|r| r.skipped)
    }

    pub fn stats(&self) -> Stats {
        let sum = |i: u32| -> u64 {
            self.stats.get(&i, 0).map(|v| v.iter().copied().fold(0u64, u64::wrapping_add)).unwrap_or(0)
        };
        Stats {
            ringbuf_drops: sum(stat::RINGBUF_DROPS),
            map_full: sum(stat::MAP_FULL),
            unmatched_returns: sum(stat::UNMATCHED_RETURNS),
            cgroup_slots_full: sum(stat::CGROUP_SLOTS_FULL),
            out_ptr_unreadable: sum(stat::OUT_PTR_UNREADABLE),
            skipped_runs: self
                .programs
                .iter()
                .filter_map(recursion_misses)
                .chain(self.guard_skips())
                .fold(0, u64::wrapping_add),
        }
    }
}

/// The kernel's count of skipped runs of one program (BPF_OBJ_GET_INFO_BY_FD).
fn recursion_misses(fd: &ProgramFd) -> Option<u64> {
    use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};
    // SAFETY: plain-old-data kernel structs; all-zero is their initial state.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // The `info` member of the union, as the command reads it.
    attr.info.bpf_fd = fd.as_fd().as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of::<bpf_prog_info>() as u32;
    attr.info.info = std::ptr::addr_of_mut!(info) as u64;
    // SAFETY: the kernel writes at most info_len bytes into `info`.
    unsafe { bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }.then_some(info.recursion_misses)
}

/// The bpf(2) system call, for the commands aya 0.14 does not wrap; true
/// when it succeeded.
///
/// # Safety
/// `attr` must be filled in as `cmd` requires, its pointers valid.
unsafe fn bpf(cmd: aya_obj::generated::bpf_cmd, attr: &mut aya_obj::generated::bpf_attr) -> bool {
    // SAFETY: as the caller promises.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            std::ptr::from_mut(attr),
            std::mem::size_of::<aya_obj::generated::bpf_attr>(),
        )
    };
    r == 0
}
