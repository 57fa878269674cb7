//! Atomic read-modify-write on map values.
//!
//! `core::sync::atomic` offers no read-modify-write methods on the BPF
//! target, so these use the compiler intrinsics (the eBPF crate is built
//! with nightly anyway). With `-C target-cpu=v3` (see gpumem-user/build.rs) LLVM lowers them to
//! BPF `atomic_fetch_add` and `cmpxchg`, available since kernel 5.12.
use core::intrinsics::{atomic_cxchg, atomic_xadd, AtomicOrdering};

/// Adds `v` to `*p` and returns the previous value.
///
/// # Safety
/// `p` must point to a valid, 8-byte aligned u64 (a map value).
#[inline(always)]
pub unsafe fn fetch_add(p: *mut u64, v: u64) -> u64 {
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) }
}

/// Stores `new` if `*p == old`; returns the value found.
///
/// # Safety
/// As for [`fetch_add`].
#[inline(always)]
pub unsafe fn compare_exchange(p: *mut u64, old: u64, new: u64) -> u64 {
    unsafe { atomic_cxchg::<u64, { AtomicOrdering::Relaxed }, { AtomicOrdering::Relaxed }>(p, old, new).0 }
}
