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
use gpumem_common::{map_name, stat, ProcUsage};

use super::{BpfError, Tracer};

/// Handles on the kernel's usage maps.
pub struct KernelMaps {
    procs: BpfHashMap<MapData, u32, ProcUsage>,
    cgroups: BpfHashMap<MapData, u64, u64>,
    stats: PerCpuArray<MapData, u64>,
    /// Every loaded program, for the runs the kernel skipped.
    programs: Vec<ProgramFd>,
}

/// Kernel counters, summed over CPUs (see `gpumem_common::stat`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub ringbuf_drops: u64,
    pub map_full: u64,
    pub unmatched_returns: u64,
    pub cgroup_slots_full: u64,
    pub out_ptr_unreadable: u64,
    /// Runs of gpumem's programs the kernel skipped (`recursion_misses`:
    /// another BPF program was running on that CPU): each one a call
    /// gpumem did not see whole.
    pub skipped_runs: u64,
}

impl KernelMaps {
    pub fn take(tracer: &mut Tracer) -> Result<Self, BpfError> {
        Ok(Self {
            procs: tracer.take_map(map_name::PROC_USAGE)?,
            cgroups: tracer.take_map(map_name::CGROUP_USAGE)?,
            stats: tracer.take_map(map_name::STATS)?,
            programs: tracer.program_fds(),
        })
    }

    /// Bytes held per process, as the kernel counts them.
    pub fn processes(&self) -> HashMap<u32, u64> {
        self.procs.iter().flatten().map(|(tgid, u)| (tgid, u.bytes)).collect()
    }

    /// Bytes held per cgroup id, as the kernel counts them.
    pub fn cgroups(&self) -> HashMap<u64, u64> {
        self.cgroups.iter().flatten().collect()
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
            skipped_runs: self.programs.iter().filter_map(recursion_misses).fold(0, u64::wrapping_add),
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
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_int,
            std::ptr::addr_of_mut!(attr),
            std::mem::size_of::<bpf_attr>(),
        )
    };
    (r == 0).then_some(info.recursion_misses)
}
