//! How many of the matrix's kernels boot at once.
use anyhow::Context;

/// How many kernels boot at once: GPUMEM_VM_LANES, else one a CPU, as
/// many as the memory available holds at 4 GiB a guest, up to the four
/// columns. A guest keeps about 60% of its two emulated CPUs busy (the
/// tests pace workloads and wait on the agent's drains), so two side by
/// side finish sooner than one after the other even on a host of two
/// cores. More than one a CPU gains nothing once the host is busy: in
/// `cargo xtask test` on two cores (beside the host's suite and the fuzz
/// build), four guests had each run 28 to 33 of their 48 tests after
/// 1,250 s, where two at a time each ran all 48 in 715 to 1,076 s.
pub fn lanes() -> anyhow::Result<usize> {
    match std::env::var("GPUMEM_VM_LANES") {
        Err(_) => {
            Ok(lanes_for(std::thread::available_parallelism().map_or(2, |n| n.get()), available_memory()))
        }
        Ok(v) => v.parse::<usize>().ok().filter(|n| *n > 0).with_context(|| {
            format!("GPUMEM_VM_LANES={v:?}: give how many kernels may boot at once, 1 or more")
        }),
    }
}

/// What one guest takes: its 3 GiB (`qemu::spawn`) and QEMU's own.
const GUEST_MEMORY: u64 = 4 << 30;

/// The lanes `cpus` CPUs and `available` bytes of memory (None: unknown)
/// hold: 1 to 4.
fn lanes_for(cpus: usize, available: Option<u64>) -> usize {
    let by_memory = available.map_or(cpus, |bytes| (bytes / GUEST_MEMORY) as usize);
    cpus.min(by_memory).clamp(1, 4)
}

/// The memory this machine has available (`MemAvailable` in
/// /proc/meminfo), if it says.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::{lanes_for, GUEST_MEMORY};

    #[test]
    fn lanes_are_one_a_cpu_as_memory_allows_up_to_the_four_columns() {
        assert_eq!(lanes_for(2, None), 2);
        assert_eq!(lanes_for(2, Some(22 << 30)), 2);
        assert_eq!(lanes_for(1, Some(22 << 30)), 1);
        assert_eq!(lanes_for(16, Some(22 << 30)), 4);
        assert_eq!(lanes_for(16, Some(GUEST_MEMORY * 3 - 1)), 2);
        assert_eq!(lanes_for(16, Some(0)), 1);
    }
}
