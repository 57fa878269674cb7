//! The `deny` action: the refused call returns `CUDA_ERROR_OUT_OF_MEMORY`
//! without entering the driver. At the entry uprobe the return address is
//! at the top of the stack; the program sets rax to the error and moves
//! rip to a `ret` instruction (a 0xC3 byte the agent found after the
//! function's start, passed in the attach cookie). The stack is left as
//! the caller made it, so the return probe, which hijacks that return
//! address after the entry programs ran, still fires on the way back.
//!
//! Only kernels that let uprobe programs store into `pt_regs` load this
//! store. `DENY_BY_REGISTERS` is read-only data the agent sets to 1 at load
//! where the kernel allows it; while 0 the verifier proves the store dead
//! and never checks it, so the same object loads on every kernel.
use aya_ebpf::programs::ProbeContext;
use gpumem_common::CUDA_ERROR_OUT_OF_MEMORY;

#[no_mangle]
static DENY_BY_REGISTERS: u8 = 0;

/// Whether this kernel lets programs deny calls (the agent said so at load).
#[inline(always)]
pub fn can_deny() -> bool {
    // SAFETY: a read of read-only data the loader set.
    unsafe { core::ptr::read_volatile(&DENY_BY_REGISTERS) != 0 }
}

/// The distance from the probed function to a `ret`, when this call can be
/// denied by register writes, else 0 (`c`: the probe's cookie). (A plain
/// integer, not an Option: an Option's payload may be spilled
/// uninitialised and read back, which kernels before about 6.2 reject as
/// a read of uninitialised stack.)
#[inline(always)]
pub fn ret_delta(c: u64) -> u64 {
    if !can_deny() {
        return 0;
    }
    gpumem_common::cookie::ret_delta(c) as u64
}

/// Makes the probed call return `CUDA_ERROR_OUT_OF_MEMORY` at once.
#[inline(always)]
pub fn return_out_of_memory(ctx: &ProbeContext, delta: u64) {
    // SAFETY: the context's registers are the caller's, and this kernel
    // allows the stores (DENY_BY_REGISTERS says so).
    unsafe {
        let regs = ctx.regs;
        (*regs).rax = CUDA_ERROR_OUT_OF_MEMORY as u64;
        (*regs).rip += delta;
    }
    crate::base::log::deny(CUDA_ERROR_OUT_OF_MEMORY, delta);
}
