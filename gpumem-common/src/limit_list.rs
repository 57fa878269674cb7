//! The limits a call is reserved under, packed in a u64: byte `i` is the
//! `LIMITS` slot + 1 of the `i`-th nearest limit (0: none). The kernel
//! builds it at a call's entry and keeps it with the live allocation.
//!
//! Built without a count: the kernel pushes limits farthest first, each in
//! at the low byte, and keeps the nearest [`LIMITS_PER_CALL`]. A count
//! would be a value the eBPF verifier must track exactly, and it would walk
//! the rest of the entry program once per count.
use crate::maps::{LIMITS_PER_CALL, MAX_LIMITS};

const _: () = assert!(LIMITS_PER_CALL >= 1 && LIMITS_PER_CALL <= 8);

/// `list` with limit `slot` (if any, and a valid slot) as its nearest.
#[inline(always)]
pub const fn push(list: u64, slot: Option<u32>) -> u64 {
    match slot {
        Some(s) if s < MAX_LIMITS => (list << 8) | (s as u64 + 1),
        _ => list,
    }
}

/// The nearest [`LIMITS_PER_CALL`] limits of `list`.
#[inline(always)]
pub const fn nearest(list: u64) -> u64 {
    list & (u64::MAX >> (64 - 8 * LIMITS_PER_CALL))
}

/// The `i`-th nearest limit's slot (0-based), or None.
#[inline(always)]
pub const fn at(list: u64, i: usize) -> Option<u32> {
    let b = ((list >> (8 * i)) & 0xff) as u32;
    if b != 0 && b <= MAX_LIMITS {
        Some(b - 1)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_last_is_nearest_and_only_the_nearest_are_kept() {
        // Farthest first: cgroups root .. leaf, then comm, then process.
        let mut l = 0;
        for s in [10, 11, 12, 13, 14, 15] {
            l = push(l, Some(s));
        }
        let l = nearest(l);
        let got: [Option<u32>; 5] = [at(l, 0), at(l, 1), at(l, 2), at(l, 3), at(l, 4)];
        assert_eq!(got, [Some(15), Some(14), Some(13), Some(12), None]);
    }

    #[test]
    fn none_and_invalid_slots_are_not_pushed() {
        let l = push(push(push(0, Some(3)), None), Some(MAX_LIMITS));
        assert_eq!((at(l, 0), at(l, 1)), (Some(3), None));
        assert_eq!(push(0, Some(0)), 1);
        assert_eq!(at(0, 0), None);
        // A byte above MAX_LIMITS (not a slot + 1) reads as none.
        assert_eq!(at(0xff, 0), None);
    }
}
