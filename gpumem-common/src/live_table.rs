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

/// A region of addresses whose pages take neighbouring slots
/// ([`live_slot`]): 2 MiB, the driver's large page.
pub const LIVE_REGION_SHIFT: u32 = 21;
/// The finest alignment [`live_slot`] tells apart within a region
/// without hashing: 512 bytes, the driver's smallest (cuMemAlloc's
/// pointers are aligned to at least 256).
pub const LIVE_UNIT_SHIFT: u32 = 9;

/// The live table's first slot for `key`; a key takes the first free of
/// [`LIVE_PROBES`] slots from there, wrapping.
///
/// Where the region ([`LIVE_REGION_SHIFT`]) starts is a hash (Fibonacci
/// hashing of the region's number with the process, the namespace and the
/// address's bits below [`LIVE_UNIT_SHIFT`]): regions scatter over the
/// table. Within it, the region's 512-byte units map one to one onto 4,096
/// slots from there, pages side by side (the unit within a page picks
/// one of 8 runs of 512 slots). So allocations made one after another
/// from fresh memory, as a driver hands it out, land in neighbouring
/// slots: the table's cache lines and pages are warm for the next insert,
/// where a hash of the whole address sent each to a cold line (an
/// `alloc_return` of the bench's plain loop spent half its time waiting
/// for that one line), and no two 512-byte-aligned allocations of one
/// region share a first slot.
pub const fn live_slot(key: &LiveKey) -> u32 {
    let low = key.addr & ((1 << LIVE_UNIT_SHIFT) - 1);
    let salt = ((key.tgid as u64) << 32 | key.ns as u64).rotate_left(29) ^ low << 43;
    let h = ((key.addr >> LIVE_REGION_SHIFT) ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let start = (h >> (64 - LIVE_SLOTS.trailing_zeros())) as u32;
    const UNITS_PER_PAGE_SHIFT: u32 = 12 - LIVE_UNIT_SHIFT;
    // Pages take every other slot: a run of a region's pages, full, still
    // leaves another key's group of LIVE_PROBES two free slots.
    const RUN_SHIFT: u32 = LIVE_REGION_SHIFT - 12 + 1;
    let unit = ((key.addr >> LIVE_UNIT_SHIFT) & ((1 << (LIVE_REGION_SHIFT - LIVE_UNIT_SHIFT)) - 1)) as u32;
    let page = unit >> UNITS_PER_PAGE_SHIFT;
    let in_page = unit & ((1 << UNITS_PER_PAGE_SHIFT) - 1);
    start.wrapping_add(page << 1 | in_page << RUN_SHIFT) & (LIVE_SLOTS - 1)
}

/// The first slot for `key` in a table made by a build of the layout
/// before slots by region (`handover::SCATTERED_SLOTS_LAYOUT`): Fibonacci
/// hashing of the whole address with the process and namespace. A build
/// that takes such a table over keeps placing keys so, or its frees would
/// look for the old build's allocations in other slots.
pub const fn live_slot_scattered(key: &LiveKey) -> u32 {
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

    /// Pages allocated one after another in a region take neighbouring
    /// slots (the next insert's cache line is warm); the 8 units of a page
    /// and an address off the 512-byte grid take slots of their own.
    #[test]
    fn pages_of_a_region_take_neighbouring_slots() {
        let key = |addr| LiveKey { tgid: 7, ns: crate::maps::ns::DEVICE_PTR, addr };
        let region = 0x7f00_0020_0000u64;
        let first = live_slot(&key(region));
        for page in 0..512u64 {
            let slot = live_slot(&key(region + page * 4096));
            assert_eq!(slot, first.wrapping_add(2 * page as u32) & (LIVE_SLOTS - 1), "page {page}");
        }
        let mut units: vec::Vec<u32> = (0..4096u64).map(|u| live_slot(&key(region + u * 512))).collect();
        units.sort_unstable();
        units.dedup();
        assert_eq!(units.len(), 4096, "each unit of a region its own first slot");
        assert_ne!(live_slot(&key(region + 8)), first);
        assert_ne!(live_slot(&key(region + (2 << 20))), first.wrapping_add(1024) & (LIVE_SLOTS - 1));
    }

    /// The table filled as the programs fill it (each key the first free
    /// of its `LIVE_PROBES` slots, else `LIVE`) by processes allocating as
    /// drivers do: pages one after another, 2 MiB blocks, a pool's mixed
    /// sizes, one process's allocations spread over many regions. Runs of
    /// neighbouring slots must not send many more to `LIVE` than scattered
    /// slots would: here, 43% of the table taken, 835 keys of 28,000 (a
    /// hash of the whole address: 184); at most 1 in 26.
    #[test]
    fn runs_of_pages_leave_room_for_other_keys() {
        let mut table = vec![false; LIVE_SLOTS as usize];
        let (mut kept, mut spilled) = (0u32, 0u32);
        let mut put = |key: LiveKey| {
            let first = live_slot(&key);
            let free = (0..LIVE_PROBES)
                .map(|i| (first.wrapping_add(i) & (LIVE_SLOTS - 1)) as usize)
                .find(|&i| !table[i]);
            match free {
                Some(i) => {
                    table[i] = true;
                    kept += 1;
                }
                None => spilled += 1,
            }
        };
        let device = crate::maps::ns::DEVICE_PTR;
        let mut next = 0x7f00_0000_0000u64;
        for (tgid, count, size) in [(10u32, 8_000u64, 4096u64), (11, 2_000, 2 << 20), (12, 6_000, 512)] {
            for _ in 0..count {
                put(LiveKey { tgid, ns: device, addr: next });
                next += size;
            }
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..8_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = 512 << (x % 8);
            put(LiveKey { tgid: 13, ns: device, addr: next });
            next += size;
        }
        for i in 0..4_000u64 {
            put(LiveKey { tgid: 14, ns: device, addr: 0x7000_0000_0000 + i * (6 << 20) + (i % 7) * 4096 });
        }
        std::eprintln!("kept {kept}, spilled {spilled}");
        assert!(spilled * 25 <= kept, "{spilled} of {} sent to LIVE", kept + spilled);
    }

    #[test]
    fn the_process_and_namespace_change_the_slot() {
        let key = LiveKey { tgid: 7, ns: crate::maps::ns::DEVICE_PTR, addr: 0x7f00_0020_0000 };
        for slot in [live_slot, live_slot_scattered] {
            assert_ne!(slot(&key), slot(&LiveKey { tgid: 8, ..key }));
            assert_ne!(slot(&key), slot(&LiveKey { ns: crate::maps::ns::HOST_PTR, ..key }));
        }
    }
}
