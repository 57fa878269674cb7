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
//!
//! Every uprobe program is defined by [`guarded`], which takes the guard of
//! its entry in `gpumem_common::program` (checked at compile time to name
//! the same program).
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

/// Runs `body` unless a run of the program with guard `guard` is under way
/// on this CPU; then returns 0 and counts the skip. `guard` is below
/// `GUARDED_PROGRAMS` (`gpumem_common::program` asserts it for every
/// program).
#[inline(always)]
pub fn exclusive(guard: u32, body: impl FnOnce() -> u32) -> u32 {
    let key = core::ptr::addr_of!(KEYS[guard as usize]);
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
        if crate::base::atomic::exchange(core::ptr::addr_of_mut!((*g).busy), 1) != 0 {
            let skipped = core::ptr::addr_of_mut!((*g).skipped);
            core::ptr::write_volatile(skipped, core::ptr::read_volatile(skipped) + 1);
            return 0;
        }
    }
    log_skips(g, guard);
    let r = body();
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*g).busy), 0) };
    r
}

/// With `--bpf-log`, says how many runs of this program were skipped on
/// this CPU since it last said so. Done by the next run that takes the
/// guard: a skipped run must not touch the stack it would share.
#[inline(always)]
fn log_skips(g: *mut Running, guard: u32) {
    if !crate::base::log::ENABLED {
        return;
    }
    // SAFETY: this CPU's entry, held by this run.
    let (skipped, logged) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!((*g).skipped)),
            core::ptr::read_volatile(core::ptr::addr_of!((*g).logged)),
        )
    };
    if skipped != logged {
        crate::base::log::skipped(skipped - logged, guard);
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*g).logged), skipped) };
    }
}

/// Defines a uprobe or uretprobe program `$name` that runs `$run(ctx)`
/// under its guard, `gpumem_common::program::Program::$program`'s (whose
/// name must be `$name`: checked as it compiles).
macro_rules! guarded {
    ($(#[$doc:meta])* uprobe $name:ident = $program:ident => $run:path) => {
        $(#[$doc])*
        #[aya_ebpf::macros::uprobe]
        pub fn $name(ctx: aya_ebpf::programs::ProbeContext) -> u32 {
            $crate::base::guard::guarded!(@run $name, $program, $run, ctx)
        }
    };
    ($(#[$doc:meta])* uretprobe $name:ident = $program:ident => $run:path) => {
        $(#[$doc])*
        #[aya_ebpf::macros::uretprobe]
        pub fn $name(ctx: aya_ebpf::programs::RetProbeContext) -> u32 {
            $crate::base::guard::guarded!(@run $name, $program, $run, ctx)
        }
    };
    (@run $name:ident, $program:ident, $run:path, $ctx:ident) => {{
        const PROGRAM: gpumem_common::program::Program = gpumem_common::program::Program::$program;
        const _: () = assert!(
            gpumem_common::str_eq(PROGRAM.name(), stringify!($name)),
            "a program's function is named as its entry in gpumem_common::program"
        );
        $crate::base::guard::exclusive(PROGRAM.guard(), || $run($ctx))
    }};
}
pub(crate) use guarded;
