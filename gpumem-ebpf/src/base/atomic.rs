//! Atomic read-modify-write on map values.
//!
//! `core::sync::atomic` offers no read-modify-write methods on the BPF
//! target, so these use the compiler intrinsics (the eBPF crate is built
//! with nightly anyway).
//!
//! Fetch-add is written in BPF assembly. With LLVM 22 and `-mcpu=v3`, an
//! `atomicrmw add` whose result is used comes out as the non-fetching
//! `lock *(u64 *)(r + 0) += r`, and the "result" register keeps the
//! addend (seen with llvm-objdump on this object, whatever the ordering:
//! every total came out one size too high). The instruction itself,
//! `atomic_fetch_add` (BPF_ATOMIC | BPF_FETCH, kernels 5.12 and later), is
//! one step for the CPU and one instruction for the verifier; the
//! compare-exchange loop it replaces cost the verifier a path per retry at
//! every call site (most of the agent's start-up time).
use core::intrinsics::{atomic_cxchg, atomic_xadd, atomic_xchg, AtomicOrdering};

/// Stores `new` if `*p == old`; returns the value found.
///
/// # Safety
/// `p` must point to a valid, 8-byte aligned u64 (a map value).
#[inline(always)]
pub unsafe fn compare_exchange(p: *mut u64, old: u64, new: u64) -> u64 {
    // SAFETY: the caller's promise about `p`.
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::Relaxed }, { AtomicOrdering::Relaxed }>(p, old, new).0 }
}

/// Adds `v` to `*p` and returns the previous value, in one atomic step.
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn fetch_add(p: *mut u64, v: u64) -> u64 {
    let mut r = v;
    // SAFETY: `p` is a valid, aligned u64 (the caller's promise); the
    // instruction reads and writes only it, and `r`.
    unsafe {
        core::arch::asm!(
            "{r} = atomic_fetch_add((u64 *)({p} + 0), {r})",
            p = in(reg) p,
            r = inout(reg) r,
            options(nostack),
        )
    };
    r
}

/// Adds `v` to `*p` atomically, returning nothing: the plain BPF atomic
/// add (no fetch), cheap for the verifier.
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn add_nofetch(p: *mut u64, v: u64) {
    // SAFETY: the caller's promise about `p`.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// [`add_nofetch`] on a u32 (the BPF 32-bit atomic add).
///
/// # Safety
/// `p` must point to a valid, 4-byte aligned u32 (in a map value).
#[inline(always)]
pub unsafe fn add_nofetch_u32(p: *mut u32, v: u32) {
    // SAFETY: the caller's promise about `p`.
    unsafe { atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(p, v) };
}

/// Stores `v` at `p` after every access to memory before it: the
/// compiler moves none past it (to the compiler the asm reads and writes
/// any memory), and x86-64, the one architecture gpumem runs on, makes
/// stores visible in program order and never lets a load pass a later
/// store (TSO), so the JIT's plain `mov` publishes what was written
/// before. A release store without the cost of a locked `xchg` (a full
/// barrier, about 10 ns a live-table insert or free on the bench's host),
/// for a word only its writer may change at that point (a claimed slot's
/// state, see account/live.rs).
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn store_release(p: *mut u64, v: u64) {
    // SAFETY: the caller's promise about `p`; a plain 8-byte store.
    unsafe {
        core::arch::asm!(
            "*(u64 *)({p} + 0) = {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack),
        )
    };
}

/// Stores `v` and returns the value it replaced, in one atomic step (the
/// BPF `xchg`, which always fetches).
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn exchange(p: *mut u64, v: u64) -> u64 {
    // SAFETY: the caller's promise about `p`.
    unsafe { atomic_xchg::<u64, { AtomicOrdering::SeqCst }>(p, v) }
}

/// Adds `v` to `*p` atomically and returns the new value.
#[inline(always)]
pub fn add(p: *mut u64, v: u64) -> u64 {
    // SAFETY: `p` points into a map value the verifier has bounds-checked;
    // map values are 8-byte aligned.
    unsafe { fetch_add(p, v) }.wrapping_add(v)
}

/// Subtracts `v` from `*p` atomically and returns the new value.
#[inline(always)]
pub fn sub(p: *mut u64, v: u64) -> u64 {
    add(p, v.wrapping_neg())
}
