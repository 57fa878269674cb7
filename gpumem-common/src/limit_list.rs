//! The limits a call is reserved under, packed in a u64: byte `i` (0 to
//! `LIMITS_PER_CALL` - 1) is the `LIMITS` slot + 1 of the `i`-th nearest
//! limit (0: none); byte 4 says which of the calling process's own
//! declared limits (`declare`) it is reserved under, byte 5 on which
//! device. The kernel builds it at a call's entry and keeps it with the
//! live allocation.
//!
//! Built without a count: the kernel pushes limits farthest first, each in
//! at the low byte, and keeps the nearest [`LIMITS_PER_CALL`]. A count
//! would be a value the eBPF verifier must track exactly, and it would walk
//! the rest of the entry program once per count.
use crate::maps::{LIMITS_PER_CALL, MAX_LIMITS};

const _: () = assert!(LIMITS_PER_CALL >= 1 && LIMITS_PER_CALL <= 4);

/// Byte 4 bits: reserved under the process's declared limit over all
/// devices (`GPUMEM_LIMIT`) ...
pub const DECLARED_TOTAL_BIT: u32 = 1;
/// ... and under its device's own (HAMi's, NVIDIA's, KAI's).
pub const DECLARED_DEVICE_BIT: u32 = 2;

/// A decision record's `slot` for the caller's declared limit over all
/// devices; `DECLARED_DEVICE + d` for device `d`'s own. Past every slot.
pub const DECLARED_TOTAL: u32 = 0xE0;
pub const DECLARED_DEVICE: u32 = DECLARED_TOTAL + 1;
const _: () = assert!(MAX_LIMITS < DECLARED_TOTAL);

/// `list` also reserved under the declared limits `bits` (of
/// [`DECLARED_TOTAL_BIT`], [`DECLARED_DEVICE_BIT`]) on `device`.
#[inline(always)]
pub const fn with_declared(list: u64, bits: u32, device: u32) -> u64 {
    (list & 0xffff_ffff) | ((bits & 3) as u64) << 32 | ((device & 0xff) as u64) << 40
}

/// The declared limits `list` is reserved under, and their device.
#[inline(always)]
pub const fn declared(list: u64) -> (u32, u32) {
    (((list >> 32) & 3) as u32, ((list >> 40) & 0xff) as u32)
}

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
    fn declared_limits_ride_beside_the_slots() {
        let l = with_declared(push(0, Some(5)), DECLARED_TOTAL_BIT | DECLARED_DEVICE_BIT, 3);
        assert_eq!((at(l, 0), at(l, 1), declared(l)), (Some(5), None, (3, 3)));
        assert_eq!(declared(nearest(push(0, Some(1)))), (0, 0));
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
