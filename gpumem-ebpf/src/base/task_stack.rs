//! Every uprobe program runs on its task's kernel stack, so no run is ever
//! skipped or shares a stack with another.
//!
//! From 6.13 the x86-64 JIT gives each function of a kprobe-type program
//! whose frame is 64 bytes or more (after rounding) a private stack: one
//! per program per CPU (`check_max_stack_depth` in kernel/bpf/verifier.c),
//! relying on the recursion check that kprobes, tracepoints and perf
//! events run under to keep a second run off it. Uprobe programs have no
//! such check: they run preemptible, under tasks-trace RCU with migration
//! disabled (`bpf_prog_run_array_uprobe`, unchanged up to 7.3). On a
//! kernel that preempts there (Debian's are `PREEMPT_LAZY` from 6.13),
//! another task on the same CPU runs the same program on the same private
//! stack: seen on 7.2.13 under QEMU as a map value pointer spilled to that
//! stack coming back with its low half overwritten (an oops in
//! `alloc_return`). A per-CPU guard that skipped
//! such runs kept the kernel safe but lost calls (a skipped alloc return
//! is memory never charged, so a limit could be passed).
//!
//! The verifier gives no private stack to a program that contains a tail
//! call ("any prog having tail call also uses kernel stack", same
//! function). So every uprobe program begins with a tail call into
//! [`TASK_STACK`], a program array that stays empty: the call finds no
//! program and falls through (a bounds check and a null test), and each
//! run has its own task's stack, preempted or not. A unit test of the agent
//! (`gpumem-user/src/bpf/stack_check.rs`) checks the built objects: every
//! uprobe program holds the tail call whatever the compiler does.
//! (Raw tracepoint programs need none: the kernel guards each with a
//! per-program recursion check, and skips a run it trips; what a skipped
//! exit leaves, the agent finishes: see `release_gone` in
//! families/exit.rs.)
//!
//! Every uprobe program is defined by [`on_task_stack`], whose name is
//! checked at compile time against its entry in `gpumem_common::program`.
use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_tail_call;

use crate::maps::TASK_STACK;

/// The tail call that keeps the program on its task's stack. `ctx` is the
/// program's context; the array is empty, so the call returns.
#[inline(always)]
pub fn fall_through(ctx: *mut c_void) {
    // SAFETY: the map pointer is the map's definition (what the loader
    // relocates); no program is ever stored in it, so the helper returns
    // (-ENOENT) without jumping.
    unsafe { bpf_tail_call(ctx, core::ptr::addr_of!(TASK_STACK) as *mut c_void, 0) };
}

/// Defines a uprobe or uretprobe program `$name` that runs `$run(ctx)` on
/// its task's stack where this build's programs run (see `handover`);
/// `gpumem_common::program::Program::$program` must be named `$name`
/// (checked as it compiles).
macro_rules! on_task_stack {
    ($(#[$doc:meta])* uprobe $name:ident = $program:ident => $run:path) => {
        $(#[$doc])*
        #[aya_ebpf::macros::uprobe]
        // Into the program's own section: a function of its own (LLVM's
        // choice for a long one) is a subprogram, whose tail call the
        // kernel refuses without BTF ("tail_call is not allowed in
        // subprogs without BTF"), as the multi-link programs load.
        #[inline(always)]
        pub fn $name(ctx: aya_ebpf::programs::ProbeContext) -> u32 {
            $crate::base::task_stack::on_task_stack!(@run $name, $program, $run, ctx, false)
        }
    };
    ($(#[$doc:meta])* uretprobe $name:ident = $program:ident => $run:path) => {
        $(#[$doc])*
        #[aya_ebpf::macros::uretprobe]
        // Into the program's own section: a function of its own (LLVM's
        // choice for a long one) is a subprogram, whose tail call the
        // kernel refuses without BTF ("tail_call is not allowed in
        // subprogs without BTF"), as the multi-link programs load.
        #[inline(always)]
        pub fn $name(ctx: aya_ebpf::programs::RetProbeContext) -> u32 {
            $crate::base::task_stack::on_task_stack!(@run $name, $program, $run, ctx, true)
        }
    };
    (@run $name:ident, $program:ident, $run:path, $ctx:ident, $is_return:literal) => {{
        const PROGRAM: gpumem_common::program::Program = gpumem_common::program::Program::$program;
        const _: () = assert!(
            gpumem_common::str_eq(PROGRAM.name(), stringify!($name)),
            "a program's function is named as its entry in gpumem_common::program"
        );
        $crate::base::task_stack::fall_through(aya_ebpf::EbpfContext::as_ptr(&$ctx));
        if !$crate::base::handover::uprobe_runs(&$ctx, $is_return) {
            return 0;
        }
        $run($ctx)
    }};
}
pub(crate) use on_task_stack;
