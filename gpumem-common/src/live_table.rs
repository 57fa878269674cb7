//! The live table's slots (`LIVE_TABLE`, gpumem-ebpf's account/live.rs):
//! their layout, state word and hash, shared by the programs that fill and
//! empty them and the agent that reads them.
use crate::maps::{LiveAlloc, LiveKey};

/// Slots of the live table (`LIVE_TABLE`, see [`LiveSlot`]): a power of
/// two. 64Ki slots of 88 bytes, 5.8 MB of kernel memory; allocations
/// beyond what a key's slots hold go to `LIVE`.
pub const LIVE_SLOTS: u32 = 1 << 16;
/// Slots a key may take, from its hash on ([`live_slot`]).
pub const LIVE_PROBES: u32 = 4;
/// One slot of the live table (`LIVE_TABLE`): an open-addressed array
/// holding live allocations other than VMM handles, so that the hot path
/// finds an allocation without a hash map's bucket lock and memory
/// allocation (an array's lookup is inlined by the verifier). `state` is
/// [`slot_state`]'s word: claimed and released by compare-exchange, with a
/// sequence that changes at every claim, so a slot emptied and taken again
/// between a reader's look and its claim is not claimed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSlot {
    pub state: u64,
    pub key: LiveKey,
    pub live: LiveAlloc,
}

/// `LIVE_SPILLED`'s entries: whether the programs must look in `LIVE` for
/// an allocation that is not a VMM handle.
pub mod spilled {
    /// Allocations this build put in `LIVE` (their slots taken), counted
    /// up before each goes in and down after each comes out: never below
    /// what `LIVE` holds of them, and 0 again once none is left.
    pub const COUNT: u32 = 0;
    /// 1 while `LIVE` may hold allocations of a build before the table
    /// (set at a takeover from one; the agent clears it once `LIVE` holds
    /// no allocation but VMM handles, as that build is gone).
    pub const OLD: u32 = 1;
    pub const ENTRIES: u32 = 2;
    /// `LiveAlloc::retained` (a VMM handle's field) of an allocation in
    /// [`COUNT`]: taken out, the count goes down.
    pub const COUNTED: u32 = u32::MAX;
}

/// A live-table slot's state word: the low two bits say what the slot
/// holds, the rest count its claims.
pub mod slot_state {
    pub const EMPTY: u64 = 0;
    /// Being written (an insert) or read out (a take): only its claimer
    /// touches it.
    pub const CLAIMED: u64 = 1;
    pub const FULL: u64 = 2;
    pub const TAG: u64 = 3;
    /// What a claim adds to the sequence.
    pub const STEP: u64 = 4;

    /// `state` claimed: the next sequence, tagged claimed.
    pub const fn claimed(state: u64) -> u64 {
        (state & !TAG).wrapping_add(STEP) | CLAIMED
    }

    /// `claimed` (a claimed state) released as `tag`.
    pub const fn released(claimed: u64, tag: u64) -> u64 {
        (claimed & !TAG) | tag
    }
}

/// The live table's first slot for `key` (Fibonacci hashing of the
/// address with the process and namespace: addresses are aligned, so
/// their low bits say little); a key takes the first free of
/// [`LIVE_PROBES`] slots from there, wrapping.
pub const fn live_slot(key: &LiveKey) -> u32 {
    let salt = ((key.tgid as u64) << 32 | key.ns as u64).rotate_left(29);
    let h = (key.addr ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - LIVE_SLOTS.trailing_zeros())) as u32
}

// SAFETY: repr(C), integers only, no padding (88 bytes, asserted below).
#[cfg(feature = "user")]
unsafe impl aya::Pod for LiveSlot {}

const _: () = assert!(size_of::<LiveSlot>() == 88);

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;

    #[test]
    fn a_claim_moves_the_sequence_on_and_a_release_keeps_it() {
        let empty = slot_state::EMPTY;
        let claimed = slot_state::claimed(empty);
        assert_eq!(claimed & slot_state::TAG, slot_state::CLAIMED);
        let full = slot_state::released(claimed, slot_state::FULL);
        assert_eq!(full & slot_state::TAG, slot_state::FULL);
        let again = slot_state::released(slot_state::claimed(full), slot_state::EMPTY);
        assert_eq!(again & slot_state::TAG, slot_state::EMPTY);
        assert_ne!(again, empty, "an emptied slot is not the empty slot it was");
        assert_eq!(again >> 2, 2, "two claims");
        let wrapped = slot_state::claimed(!slot_state::TAG);
        assert_eq!(wrapped, slot_state::CLAIMED, "the sequence wraps");
    }

    /// Addresses as drivers hand them out (aligned to 512 bytes or 2 MiB,
    /// one after another) spread over the table: no slot's group of
    /// `LIVE_PROBES` takes more than a few of 4,096 keys.
    #[test]
    fn aligned_addresses_spread_over_the_table() {
        for (align, tgid) in [(512u64, 7u32), (2 << 20, 7), (512, 8), (4096, 1_000_000)] {
            let mut per_slot = vec![0u32; LIVE_SLOTS as usize];
            for i in 0..4096u64 {
                let key =
                    LiveKey { tgid, ns: crate::maps::ns::DEVICE_PTR, addr: 0x7f00_0000_0000 + i * align };
                let slot = live_slot(&key);
                assert!(slot < LIVE_SLOTS);
                per_slot[slot as usize] += 1;
            }
            assert!(per_slot.iter().all(|&n| n <= 3), "align {align}: {:?}", per_slot.iter().max());
        }
    }

    #[test]
    fn the_process_and_namespace_change_the_slot() {
        let key = LiveKey { tgid: 7, ns: crate::maps::ns::DEVICE_PTR, addr: 0x7f00_0020_0000 };
        assert_ne!(live_slot(&key), live_slot(&LiveKey { tgid: 8, ..key }));
        assert_ne!(live_slot(&key), live_slot(&LiveKey { ns: crate::maps::ns::HOST_PTR, ..key }));
    }
}
