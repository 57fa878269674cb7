//! Atomic read-modify-write on map values.
//!
//! `core::sync::atomic` offers no read-modify-write methods on the BPF
//! target, so these use the compiler intrinsics (the eBPF crate is built
//! with nightly anyway).
//!
//! Fetch-add is built from compare-exchange on purpose. With LLVM 22 and
//! `-mcpu=v3`, an `atomicrmw add` whose result is used was emitted as the
//! non-fetching `lock *(u64 *)(r + 0) += r` and the "result" register kept
//! the addend (checked with llvm-objdump on this object: every total came
//! out one size too high). `cmpxchg_64` is emitted correctly, and a loop on
//! it gives each record the exact total its own update produced.
use core::intrinsics::{atomic_cxchg, atomic_xadd, atomic_xchg, AtomicOrdering};

/// Retries before giving up on an exact previous value.
pub const CAS_TRIES: u32 = 8;

/// Stores `new` if `*p == old`; returns the value found.
///
/// # Safety
/// `p` must point to a valid, 8-byte aligned u64 (a map value).
#[inline(always)]
pub unsafe fn compare_exchange(p: *mut u64, old: u64, new: u64) -> u64 {
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::Relaxed }, { AtomicOrdering::Relaxed }>(p, old, new).0 }
}

/// Adds `v` to `*p` and returns the previous value.
///
/// Under contention beyond `CAS_TRIES` retries the add still happens
/// (atomically, never lost) and the previous value is read back, so it may
/// include another CPU's concurrent update.
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn fetch_add(p: *mut u64, v: u64) -> u64 {
    let mut cur = unsafe { core::ptr::read_volatile(p) };
    let mut i = 0;
    while i < CAS_TRIES {
        let found = unsafe { compare_exchange(p, cur, cur.wrapping_add(v)) };
        if found == cur {
            return cur;
        }
        cur = found;
        i += 1;
    }
    // Result unused: this is the plain BPF atomic add, which is correct.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
    unsafe { core::ptr::read_volatile(p) }.wrapping_sub(v)
}

/// Adds `v` to `*p` atomically, returning nothing: the plain BPF atomic
/// add (no fetch), cheap for the verifier.
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn add_nofetch(p: *mut u64, v: u64) {
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// Stores `v` and returns the value it replaced, in one atomic step (the
/// BPF `xchg`, which always fetches).
///
/// # Safety
/// As for [`compare_exchange`].
#[inline(always)]
pub unsafe fn exchange(p: *mut u64, v: u64) -> u64 {
    unsafe { atomic_xchg::<u64, { AtomicOrdering::SeqCst }>(p, v) }
}
