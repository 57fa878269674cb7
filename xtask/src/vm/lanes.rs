//! How many of the matrix's kernels boot at once.
use anyhow::Context;

/// How many kernels boot at once: GPUMEM_VM_LANES, else as many as the
/// memory available holds at 4 GiB a guest, up to 4 (the matrix's
/// columns). A guest keeps about 60% of its two emulated CPUs busy (the
/// tests pace workloads and wait on the agent's drains), so guests side
/// by side finish sooner than one after the other even on a host of two
/// cores: on a reduced selection, the four kernels took 194 s four at a
/// time against about 235 s two at a time.
pub fn lanes() -> anyhow::Result<usize> {
    match std::env::var("GPUMEM_VM_LANES") {
        Err(_) => Ok(lanes_for(available_memory())),
        Ok(v) => v.parse::<usize>().ok().filter(|n| *n > 0).with_context(|| {
            format!("GPUMEM_VM_LANES={v:?}: give how many kernels may boot at once, 1 or more")
        }),
    }
}

/// What one guest takes: its 3 GiB (`qemu::spawn`) and QEMU's own.
const GUEST_MEMORY: u64 = 4 << 30;

/// The lanes `available` bytes of memory hold: 1 to 4.
fn lanes_for(available: Option<u64>) -> usize {
    // Unknown: the two that every machine this runs on has held.
    let Some(bytes) = available else { return 2 };
    (bytes / GUEST_MEMORY).clamp(1, 4) as usize
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
    fn lanes_follow_the_memory_available_up_to_the_four_columns() {
        assert_eq!(lanes_for(None), 2);
        assert_eq!(lanes_for(Some(0)), 1);
        assert_eq!(lanes_for(Some(GUEST_MEMORY * 3 - 1)), 2);
        assert_eq!(lanes_for(Some(GUEST_MEMORY * 3)), 3);
        assert_eq!(lanes_for(Some(22 << 30)), 4);
    }
}
