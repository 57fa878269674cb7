//! The calling thread's name (`task_struct.comm`), for records' headers and
//! comm limits: read in place from the task where the agent found the
//! field in the kernel's BTF, else through `bpf_get_current_comm`.
//!
//! The helper copies with a bounded string copy (about 38 ns a call on the
//! bench's host, twice a pair); the kernel keeps `comm` NUL-padded
//! (`strscpy_pad` at exec, at a rename, and copied whole at fork), so its
//! first 16 bytes read as two words, the last made NUL, are what the
//! helper returns (and the keys comm limits are written under).
use aya_ebpf::helpers::bpf_get_current_comm;
use gpumem_common::TASK_COMM_LEN;

use crate::base::task::Task;

/// The byte offset of `comm` in the running kernel's `task_struct`, set by
/// the agent at load from `/sys/kernel/btf/vmlinux`; 0 where it found none
/// or task storage is off (the helper is used: `GPUMEM_TASK_CALLS=off`
/// runs that path in the tests). Read-only data: the verifier knows the
/// value, so the load below is checked against the task's BTF at that
/// offset, and the other path is dead code.
#[no_mangle]
static TASK_COMM_OFFSET: u32 = 0;

/// Keeps bytes 8 to 14 of `comm` (the second word, little-endian).
const LAST_BYTE_CLEARED: u64 = (1 << 56) - 1;

/// The `comm` of the current thread (`task`), NUL-padded, at most 15
/// characters.
#[inline(always)]
pub fn of(task: Task) -> [u8; TASK_COMM_LEN] {
    // SAFETY: a read of read-only data the loader set.
    let offset = unsafe { core::ptr::read_volatile(&TASK_COMM_OFFSET) } as usize;
    if offset == 0 {
        return bpf_get_current_comm().unwrap_or([0; TASK_COMM_LEN]);
    }
    // SAFETY: the kernel's own pointer to the current task, trusted by the
    // verifier, which checks each load against the task's BTF (the 16
    // bytes of `comm` at `offset`) and makes it fault-safe.
    let words: [u64; 2] = unsafe {
        let task = task.ptr();
        [
            core::ptr::read_volatile(task.add(offset).cast::<u64>()),
            // The 16th byte made NUL, as the helper's copy makes it: a
            // kernel with a longer `comm` keeps more than 15 characters.
            core::ptr::read_volatile(task.add(offset + 8).cast::<u64>()) & LAST_BYTE_CLEARED,
        ]
    };
    // SAFETY: two words are sixteen bytes, in memory order.
    unsafe { core::mem::transmute::<[u64; 2], [u8; TASK_COMM_LEN]>(words) }
}
