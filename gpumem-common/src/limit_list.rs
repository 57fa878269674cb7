//! The limits a call is reserved under, packed in a u64: 12 bits an
//! entry, entry `i` (0 to `LIMITS_PER_CALL` - 1) the `LIMITS` slot + 1 of
//! the `i`-th nearest limit (0: none); bits 48 and 49 say which of the
//! calling process's own declared limits (`declare`) it is reserved
//! under, bits 56 to 63 on which device. The kernel builds it at a call's
//! entry and keeps it with the live allocation. The same packing, without
//! the declared bits and with a shift ([`rules`]), holds the rules of one
//! target in `LIMIT_INDEX`.
//!
//! Built without a count: the kernel pushes limits farthest first, each in
//! at the low entry, and keeps the nearest [`LIMITS_PER_CALL`]. A count
//! would be a value the eBPF verifier must track exactly, and it would walk
//! the rest of the entry program once per count.
use crate::maps::{LIMITS_PER_CALL, MAX_LIMITS};

/// Bits an entry: the slot + 1.
pub const ENTRY_BITS: u32 = 12;
const ENTRY: u64 = (1 << ENTRY_BITS) - 1;
/// The bits of the entries.
const ENTRIES: u64 = (1 << (ENTRY_BITS as usize * LIMITS_PER_CALL)) - 1;
/// Where a target's rules (`rules`) say how far to shift a list to push
/// them all: `ENTRY_BITS` times their count.
const SHIFT_AT: u32 = 58;

const _: () = assert!(LIMITS_PER_CALL >= 1 && LIMITS_PER_CALL <= 4 && (MAX_LIMITS as u64) < ENTRY);

/// Bit 48: reserved under the process's declared limit over all devices
/// (`GPUMEM_LIMIT`) ...
pub const DECLARED_TOTAL_BIT: u32 = 1;
/// ... bit 49: under its device's own (HAMi's, NVIDIA's, KAI's).
pub const DECLARED_DEVICE_BIT: u32 = 2;

/// A decision record's `slot` for the caller's declared limit over all
/// devices; `DECLARED_DEVICE + d` for device `d`'s own. Past every slot.
pub const DECLARED_TOTAL: u32 = 1 << 16;
pub const DECLARED_DEVICE: u32 = DECLARED_TOTAL + 1;
const _: () = assert!(MAX_LIMITS < DECLARED_TOTAL);

/// `list` also reserved under the declared limits `bits` (of
/// [`DECLARED_TOTAL_BIT`], [`DECLARED_DEVICE_BIT`]) on `device`.
#[inline(always)]
pub const fn with_declared(list: u64, bits: u32, device: u32) -> u64 {
    (list & ENTRIES) | ((bits & 3) as u64) << 48 | ((device & 0xff) as u64) << 56
}

/// The declared limits `list` is reserved under, and their device.
#[inline(always)]
pub const fn declared(list: u64) -> (u32, u32) {
    (((list >> 48) & 3) as u32, ((list >> 56) & 0xff) as u32)
}

/// `list` with limit `slot` (if any, and a valid slot) as its nearest.
#[inline(always)]
pub const fn push(list: u64, slot: Option<u32>) -> u64 {
    match slot {
        Some(s) if s < MAX_LIMITS => (list << ENTRY_BITS) | (s as u64 + 1),
        _ => list,
    }
}

/// A target's rules as the kernel pushes them (`LIMIT_INDEX`): the
/// slots packed as a call's list packs them, the first the farthest, and
/// the shift that makes room for them all.
pub fn rules(slots: &[u32]) -> u64 {
    let slots = &slots[..slots.len().min(LIMITS_PER_CALL)];
    let packed = slots.iter().fold(0, |l, &s| push(l, Some(s)));
    packed | (ENTRY_BITS as u64 * slots.len() as u64) << SHIFT_AT
}

/// The slots of a target's [`rules`], in their order.
pub fn slots_of(rules: u64) -> impl Iterator<Item = u32> {
    (0..LIMITS_PER_CALL).rev().filter_map(move |i| at(rules, i))
}

/// `list` with a target's `rules` pushed on it, in their order: one shift
/// and one or, no branch, so that the verifier walks the rest of the
/// program once whatever a target has.
#[inline(always)]
pub const fn push_all(list: u64, rules: u64) -> u64 {
    (list << (rules >> SHIFT_AT)) | (rules & ENTRIES)
}

/// `list` with the entry `i` set to `slot`.
#[inline(always)]
pub const fn put(list: u64, i: usize, slot: u32) -> u64 {
    list | ((slot as u64 + 1) & ENTRY) << (ENTRY_BITS as usize * i)
}

/// The nearest [`LIMITS_PER_CALL`] limits of `list`.
#[inline(always)]
pub const fn nearest(list: u64) -> u64 {
    list & ENTRIES
}

/// The `i`-th nearest limit's slot (0-based), or None.
#[inline(always)]
pub const fn at(list: u64, i: usize) -> Option<u32> {
    let b = ((list >> (ENTRY_BITS as usize * i)) & ENTRY) as u32;
    if b != 0 && b <= MAX_LIMITS {
        Some(b - 1)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

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
        let full = (0..4).fold(0, |l, i| put(l, i, MAX_LIMITS - 1 - i as u32));
        assert_eq!((declared(with_declared(full, 1, 15)), at(full, 3)), ((1, 15), Some(MAX_LIMITS - 4)));
    }

    #[test]
    fn a_targets_rules_push_in_order_and_come_out() {
        let two = rules(&[7, 9]);
        let l = push_all(push(0, Some(1)), two);
        assert_eq!((at(l, 0), at(l, 1), at(l, 2), at(l, 3)), (Some(9), Some(7), Some(1), None));
        assert_eq!(push_all(l, 0), l, "a target without rules pushes nothing");
        assert_eq!(slots_of(two).collect::<Vec<_>>(), [7, 9]);
        let full = rules(&[1, 2, 3, 4]);
        assert_eq!(nearest(push_all(push(0, Some(9)), full)), nearest(full));
        assert_eq!(slots_of(full).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn none_and_invalid_slots_are_not_pushed() {
        let l = push(push(push(0, Some(3)), None), Some(MAX_LIMITS));
        assert_eq!((at(l, 0), at(l, 1)), (Some(3), None));
        assert_eq!(push(0, Some(0)), 1);
        assert_eq!(at(0, 0), None);
        // An entry above MAX_LIMITS (not a slot + 1) reads as none.
        assert_eq!(at(ENTRY, 0), None);
    }
}
