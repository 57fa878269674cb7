//! The bottom layer, used by every program: atomics, the ring-buffer
//! records, the calling thread (its task, pid, cgroup) and its comm, the
//! drop counters, the attach cookie, the tail call that keeps each
//! program on its task's stack, the task-local storage map type, the
//! gate that says which build's programs run (a takeover), the programs
//! the agent runs itself, and the diagnostic log.
//! Nothing here knows about accounting or limits.
pub mod agent_run;
pub mod atomic;
pub mod comm;
pub mod cookie;
pub mod counters;
pub mod handover;
pub mod log;
pub mod records;
pub mod task;
pub mod task_stack;
pub mod task_storage;

/// `v`, as a value the verifier knows nothing of: code after a value that
/// is a constant on some paths and not on others is otherwise walked once
/// for each constant.
#[inline(always)]
pub fn opaque(v: u64) -> u64 {
    v | crate::maps::OPAQUE.get(0).copied().unwrap_or(0)
}

/// A generation counter's value: entry 0 of a one-entry array its writer
/// bumps after each change it guards (`LIMIT_INDEX_GENERATION`,
/// `CTX_DEVICE_GENERATION`), read in place, before the lookups whose
/// result is kept under it.
#[inline(always)]
pub fn generation(counter: &aya_ebpf::maps::Array<u64>) -> u64 {
    match counter.get_ptr(0) {
        // SAFETY: a checked map value pointer, read in place.
        Some(g) => unsafe { core::ptr::read_volatile(g) },
        None => 0,
    }
}

/// `i` masked to `n` entries (`n` a power of two), right where an array is
/// indexed. The value goes through the stack so LLVM cannot drop the mask
/// on the strength of an earlier bounds check: kernels before about 6.3
/// lose such a check when the index is spilled and reloaded ("unbounded
/// memory access").
#[inline(always)]
pub fn bounded(i: usize, n: usize) -> usize {
    // SAFETY: reads a local.
    unsafe { core::ptr::read_volatile(&i) & (n - 1) }
}
