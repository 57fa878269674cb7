//! Memory pools: where a pool's memory lives, learned when the process
//! creates or looks up the pool, decides the kind and device of every
//! allocation from it (a host pool's allocations are pinned host memory,
//! a managed pool's managed memory, a device pool's that device's memory).
//!
//! The kernel keeps each process's pools in one [`ProcPools`] value
//! (`PROC_POOLS`, keyed by tgid), removed when the process exits or
//! execs; the pure parts live here, unit-tested.
use crate::kind;

/// Pools remembered per process. Past this many live pools, allocations
/// from the others are charged as device memory of the caller's current
/// device (and the kernel counts a full map).
pub const POOL_SLOTS: usize = 16;

/// Processes with pools at once.
pub const POOL_PROC_ENTRIES: u32 = 4096;

/// `CUmemAllocationType`: `CU_MEM_ALLOCATION_TYPE_MANAGED` (CUDA 13).
pub const ALLOCATION_MANAGED: u32 = 2;

/// `CUmemLocationType` values gpumem distinguishes.
pub mod location {
    pub const DEVICE: u32 = 1;
    pub const HOST: u32 = 2;
    pub const HOST_NUMA: u32 = 3;
    pub const HOST_NUMA_CURRENT: u32 = 4;
}

/// `CUmemLocation`: a location type and its id (device ordinal, NUMA node).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Location {
    pub kind: u32,
    pub id: i32,
}

/// `CUmemPoolProps` (and `CUmemAllocationProp`) up to the location:
/// allocation type, requested handle types, location.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PropsHead {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location: Location,
}

/// Where a pool's allocations are charged: memory kind and device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub kind: u32,
    pub device: u32,
}

impl Place {
    /// The place of a pool of `alloc_type` at `location`, for a caller
    /// whose current device is `current` (the device a host or managed
    /// pool's allocations are reported on, as for every host allocation).
    pub const fn of(alloc_type: u32, location: Location, current: u32) -> Place {
        let device =
            if location.kind == location::DEVICE && location.id >= 0 { location.id as u32 } else { current };
        let kind = if alloc_type == ALLOCATION_MANAGED {
            kind::MANAGED
        } else {
            match location.kind {
                location::HOST | location::HOST_NUMA | location::HOST_NUMA_CURRENT => kind::HOST,
                _ => kind::DEVICE,
            }
        };
        Place { kind, device }
    }
}

/// One process's pools: `handles[i]` (0: a free slot) is at `places[i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcPools {
    pub handles: [u64; POOL_SLOTS],
    pub places: [Place; POOL_SLOTS],
}

impl Default for ProcPools {
    fn default() -> Self {
        Self { handles: [0; POOL_SLOTS], places: [Place { kind: 0, device: 0 }; POOL_SLOTS] }
    }
}

impl ProcPools {
    /// The slot holding `pool`.
    #[inline(always)]
    pub fn find(&self, pool: u64) -> Option<usize> {
        let mut i = 0;
        while i < POOL_SLOTS {
            if pool != 0 && self.handles[i] == pool {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Where allocations from `pool` go, if the process's pool is known.
    #[inline(always)]
    pub fn place(&self, pool: u64) -> Option<Place> {
        self.find(pool).map(|i| self.places[i])
    }

    /// The slot to learn `pool` in: its own, or the first free one.
    #[inline(always)]
    pub fn slot_for(&self, pool: u64) -> Option<usize> {
        if let Some(i) = self.find(pool) {
            return Some(i);
        }
        let mut i = 0;
        while i < POOL_SLOTS {
            if self.handles[i] == 0 {
                return Some(i);
            }
            i += 1;
        }
        None
    }
}

const _: () = {
    assert!(core::mem::size_of::<Place>() == 8);
    assert!(core::mem::size_of::<PropsHead>() == 16);
    assert!(core::mem::size_of::<ProcPools>() == POOL_SLOTS * 16);
};

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: u32 = 1;

    fn at(kind: u32, id: i32) -> Location {
        Location { kind, id }
    }

    #[test]
    fn a_pools_location_and_type_decide_kind_and_device() {
        let device = |d| Place { kind: kind::DEVICE, device: d };
        assert_eq!(Place::of(PINNED, at(location::DEVICE, 1), 0), device(1));
        assert_eq!(Place::of(PINNED, at(location::HOST, -1), 3), Place { kind: kind::HOST, device: 3 });
        assert_eq!(Place::of(PINNED, at(location::HOST_NUMA, 0), 0).kind, kind::HOST);
        assert_eq!(Place::of(PINNED, at(location::HOST_NUMA_CURRENT, 0), 0).kind, kind::HOST);
        let managed = Place::of(ALLOCATION_MANAGED, at(location::DEVICE, 2), 0);
        assert_eq!(managed, Place { kind: kind::MANAGED, device: 2 });
        // Managed with no preferred location (type 0): the caller's device.
        assert_eq!(Place::of(ALLOCATION_MANAGED, at(0, 0), 1), Place { kind: kind::MANAGED, device: 1 });
        // Anything else (invalid, unknown location types) stays device
        // memory of the caller's device, as before pools were learned.
        assert_eq!(Place::of(0, at(0, 0), 1), device(1));
        assert_eq!(Place::of(PINNED, at(location::DEVICE, -1), 1), device(1));
        assert_eq!(Place::of(PINNED, at(6, 0), 0), device(0));
    }

    #[test]
    fn pools_are_found_by_handle_and_learned_into_their_own_or_the_first_free_slot() {
        let mut p = ProcPools::default();
        assert_eq!(p.place(0x10), None);
        assert_eq!(p.slot_for(0x10), Some(0));
        p.handles[0] = 0x10;
        p.places[0] = Place { kind: kind::HOST, device: 0 };
        assert_eq!(p.place(0x10), Some(Place { kind: kind::HOST, device: 0 }));
        assert_eq!(p.slot_for(0x10), Some(0), "a pool learned again keeps its slot");
        assert_eq!(p.slot_for(0x20), Some(1));
        assert_eq!(p.place(0), None, "0 is never a pool, though free slots hold it");
        p.handles = [7; POOL_SLOTS];
        p.handles[5] = 0;
        assert_eq!(p.slot_for(0x30), Some(5), "a destroyed pool's slot is reused");
        p.handles[5] = 8;
        assert_eq!(p.slot_for(0x30), None, "full");
    }
}
