//! The hash maps of live entries (`LIVE`, `VMM_MAPPINGS`), the
//! processes' current images (`PROC_USAGE`) and the cgroups' totals
//! (`CGROUP_USAGE`), on handles of their own:
//! what the agent's sweep reads on a thread of its own
//! (`health/reclaim.rs`). An entry at a time a walk cost two syscalls an
//! entry (114 to 376 ms for 35,000 entries, the bench's 100k live
//! allocations' spill): on the event loop, the ring buffer filled behind
//! it. Read in batches (`bpf/batch.rs`), it costs a few milliseconds. The entries found dead go
//! back to the loop, which has the kernel forget them
//! (`Tracer::forget_dead`): a second handle on that program would be
//! opened by its id, which needs CAP_SYS_ADMIN, and the agent runs
//! without it (the DaemonSet's capabilities).
use std::{collections::HashMap, os::fd::AsFd};

use aya::maps::{HashMap as BpfHashMap, Map, MapData};
use gpumem_common::{map_name, LiveAlloc, LiveKey, ProcUsage};

use super::{
    batch::{entries, for_each},
    error::BpfError,
};

/// An entry in the hash maps of a process image that is gone, or the
/// total of a cgroup that is, for the kernel to forget (`forget_dead`,
/// which checks it again as it removes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dead {
    /// An entry of `LIVE` (a VMM handle, or an allocation kept there) of
    /// the process image `generation`, which is not its process's current
    /// one.
    Allocation { key: LiveKey, generation: u64 },
    /// A mapping in `VMM_MAPPINGS` of a process image that is gone.
    Mapping(LiveKey),
    /// The total in `CGROUP_USAGE` of a cgroup that is gone, 0 when read
    /// (forgotten only if still 0).
    Cgroup(u64),
}

/// The hash maps' live entries, the processes' current images and the
/// cgroups holding nothing ([`HashedMaps::read`]).
#[derive(Debug, Default)]
pub struct Hashed {
    /// `LIVE` (VMM handles, and allocations the table does not keep):
    /// each entry's generation, all a sweep needs of it (the whole entry,
    /// four times the size, is a walk's peak memory).
    pub live: HashMap<LiveKey, u64>,
    /// `VMM_MAPPINGS`: (tgid, mapped address) -> handle.
    pub mappings: Vec<(LiveKey, u64)>,
    /// Each process's current generation (`ProcUsage::generation`).
    pub current: HashMap<u32, u64>,
    /// The cgroups whose total in `CGROUP_USAGE` is 0.
    pub empty_cgroups: Vec<u64>,
}

/// Handles of their own on the maps a sweep reads: moved to the sweep's
/// thread and back.
pub struct HashedMaps {
    live: BpfHashMap<MapData, LiveKey, LiveAlloc>,
    mappings: BpfHashMap<MapData, LiveKey, u64>,
    procs: BpfHashMap<MapData, u32, ProcUsage>,
    cgroups: BpfHashMap<MapData, u64, u64>,
}

impl std::fmt::Debug for HashedMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashedMaps").finish_non_exhaustive()
    }
}

impl HashedMaps {
    /// Handles of their own on `live`, `procs` and `cgroups` (`LIVE`,
    /// `PROC_USAGE`, `CGROUP_USAGE`, which the agent's other readers
    /// keep), and `mappings` (`VMM_MAPPINGS`, which nothing else reads).
    pub fn new(
        live: &MapData,
        procs: &MapData,
        cgroups: &MapData,
        mappings: BpfHashMap<MapData, LiveKey, u64>,
    ) -> Result<Self, BpfError> {
        Ok(Self {
            live: reopen(map_name::LIVE, live)?,
            mappings,
            procs: reopen(map_name::PROC_USAGE, procs)?,
            cgroups: reopen(map_name::CGROUP_USAGE, cgroups)?,
        })
    }

    /// What the hash maps of live entries hold now: `LIVE`'s entries and
    /// `VMM_MAPPINGS`'s, then each process's current generation, read
    /// after them (an image's generation is never used again, so an entry
    /// of another is dead for good), and the cgroups with a total of 0.
    pub fn read(&self) -> Hashed {
        let mut live = HashMap::new();
        for_each(&self.live, |key, a| {
            live.insert(key, a.generation);
        });
        let mappings = entries(&self.mappings);
        let current = entries(&self.procs).into_iter().map(|(tgid, u)| (tgid, u.generation)).collect();
        let empty_cgroups =
            entries(&self.cgroups).into_iter().filter(|&(_, bytes)| bytes == 0).map(|(id, _)| id).collect();
        Hashed { live, mappings, current, empty_cgroups }
    }
}

/// A handle of its own on the hash map `map` (`name`), typed.
fn reopen<K: aya::Pod, V: aya::Pod>(
    name: &'static str,
    map: &MapData,
) -> Result<BpfHashMap<MapData, K, V>, BpfError> {
    let map_err = |e| BpfError::Map { name, source: Box::new(e) };
    let fd = map.fd().as_fd().try_clone_to_owned().map_err(|e| map_err(e.into()))?;
    let data = MapData::from_fd(fd).map_err(map_err)?;
    BpfHashMap::try_from(Map::HashMap(data)).map_err(map_err)
}
