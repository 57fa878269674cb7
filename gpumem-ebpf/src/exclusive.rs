//! One run of each program per CPU at a time.
//!
//! Kernels from about 6.14 give a program with a deep stack a private,
//! per-CPU stack instead of the task's. Uprobe programs run preemptible
//! (under tasks-trace RCU, not `bpf_prog_active`), so on a kernel that
//! preempts inside them (7.x, `PREEMPT(lazy)`) another task on the same CPU
//! can run the same program on the same private stack: seen on 7.2.13 under
//! QEMU as a map value pointer spilled to that stack coming back with its
//! low half overwritten (an oops in `alloc_return`). Every uprobe program
//! therefore takes a per-CPU, per-program guard first; a run that finds its
//! program's guard taken does nothing and is counted (`dropped.skipped_runs`),
//! like the runs the kernel itself skips. The guard is looked up with its key
//! read from read-only data and kept in registers, so a skipped run writes
//! nothing to the stack it would share, and it is taken by one atomic
//! exchange, so no preemption falls between its test and its set. A unit
//! test of the agent (`gpumem-user/src/bpf/guard_check.rs`) walks the built
//! object to keep both true whatever the compiler does. (Raw tracepoint
//! programs need none: the kernel guards them per program.)
use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_map_lookup_elem;
use gpumem_common::{Running, GUARDED_PROGRAMS};

use crate::maps::RUNNING;

/// The guard keys, 0..GUARDED_PROGRAMS, in read-only data: a lookup's key
/// pointer points here, not into the stack.
static KEYS: [u32; GUARDED_PROGRAMS as usize] = keys();

const fn keys() -> [u32; GUARDED_PROGRAMS as usize] {
    let mut k = [0; GUARDED_PROGRAMS as usize];
    let mut i = 0;
    while i < k.len() {
        k[i] = i as u32;
        i += 1;
    }
    k
}

/// Runs `body` unless a run of program `which` (one of [`prog`]) is under
/// way on this CPU; then returns 0 and counts the skip.
#[inline(always)]
pub fn exclusive(which: usize, body: impl FnOnce() -> u32) -> u32 {
    let key = core::ptr::addr_of!(KEYS[which % KEYS.len()]);
    // SAFETY: the map pointer is the map's definition (what the loader
    // relocates); the key is a u32 in read-only data.
    let g = unsafe { bpf_map_lookup_elem(core::ptr::addr_of!(RUNNING) as *mut c_void, key as *const c_void) }
        as *mut Running;
    if g.is_null() {
        return 0; // every index below max_entries exists: not reached
    }
    // SAFETY: this CPU's entry; the guard itself is what keeps other runs
    // of this program on this CPU away from it. Taken by one exchange, so
    // no preemption can fall between the test and the set.
    unsafe {
        if crate::atomic::exchange(core::ptr::addr_of_mut!((*g).busy), 1) != 0 {
            let skipped = core::ptr::addr_of_mut!((*g).skipped);
            core::ptr::write_volatile(skipped, core::ptr::read_volatile(skipped) + 1);
            return 0;
        }
    }
    let r = body();
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*g).busy), 0) };
    r
}

/// Guard indexes, one per uprobe program.
pub mod prog {
    pub const ALLOC_ENTRY: usize = 0;
    pub const PITCH_ENTRY: usize = 1;
    pub const HOST_REGISTER_ENTRY: usize = 2;
    pub const ALLOC_RETURN: usize = 3;
    pub const ARRAY_ENTRY: usize = 4;
    pub const ARRAY3D_ENTRY: usize = 5;
    pub const MIPMAP_ENTRY: usize = 6;
    pub const CTX_OUT_DEV1_ENTRY: usize = 7;
    pub const CTX_OUT_DEV2_ENTRY: usize = 8;
    pub const CTX_OUT_DEV3_ENTRY: usize = 9;
    pub const CTX_OUT_DEV4_ENTRY: usize = 10;
    pub const CTX_OUT_RETURN: usize = 11;
    pub const CTX_SET_ENTRY: usize = 12;
    pub const CTX_SET_RETURN: usize = 13;
    pub const CTX_POP_ENTRY: usize = 14;
    pub const CTX_POP_RETURN: usize = 15;
    pub const FREE_ENTRY: usize = 16;
    pub const FREE_RETURN: usize = 17;
    pub const CALL_ENTRY: usize = 18;
    pub const CALL_OUT_ENTRY: usize = 19;
    pub const CALL_RETURN: usize = 20;
    pub const VMM_CREATE_ENTRY: usize = 21;
    pub const VMM_RELEASE_ENTRY: usize = 22;
    pub const VMM_RELEASE_RETURN: usize = 23;
    pub const VMM_MAP_ENTRY: usize = 24;
    pub const VMM_MAP_RETURN: usize = 25;
    pub const VMM_UNMAP_ENTRY: usize = 26;
    pub const VMM_UNMAP_RETURN: usize = 27;
}
