//! The hash maps of live entries (`LIVE`, `VMM_MAPPINGS`) and the
//! processes' current images (`PROC_USAGE`), on handles of their own, with
//! the program that forgets an entry of an image that exited or exec'd
//! (`forget_dead`): what the agent's sweep reads and runs on a thread of
//! its own (`health/reclaim.rs`). A walk costs two syscalls an entry
//! (about 120 ms for 34,000 entries, the bench's 100k live allocations'
//! spill): on the event loop, the ring buffer filled behind it.
use std::{collections::HashMap, os::fd::AsFd};

use aya::{
    maps::{HashMap as BpfHashMap, Map, MapData},
    programs::{RawTracePoint, RawTracePointRunOptions, TestRun},
};
use gpumem_common::{map_name, LiveAlloc, LiveKey, ProcUsage};

use super::{error::BpfError, probes, Tracer};

/// An entry in the hash maps of a process image that is gone, for the
/// kernel to forget (`forget_dead`, which checks it again as it removes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dead {
    /// An entry of `LIVE` (a VMM handle, or an allocation kept there) of
    /// the process image `generation`, which is not its process's current
    /// one.
    Allocation { key: LiveKey, generation: u64 },
    /// A mapping in `VMM_MAPPINGS` of a process image that is gone.
    Mapping(LiveKey),
}

/// The hash maps' live entries and the processes' current images
/// ([`HashedMaps::read`]).
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
}

/// Handles of their own on the maps a sweep reads, and on `forget_dead`:
/// moved to the sweep's thread and back.
pub struct HashedMaps {
    live: BpfHashMap<MapData, LiveKey, LiveAlloc>,
    mappings: BpfHashMap<MapData, LiveKey, u64>,
    procs: BpfHashMap<MapData, u32, ProcUsage>,
    forget: RawTracePoint,
}

impl HashedMaps {
    /// Takes `VMM_MAPPINGS` out of the tracer's object, and opens `live`'s
    /// and `procs`' maps (`LIVE`, `PROC_USAGE`, which the agent's other
    /// readers keep) and `forget_dead` again.
    pub fn take(tracer: &mut Tracer, live: &MapData, procs: &MapData) -> Result<Self, BpfError> {
        let name = probes::FORGET_DEAD;
        let program_err = |e| BpfError::Program { name, source: Box::new(e) };
        let info =
            tracer.ebpf.program(name).ok_or(BpfError::MissingProgram(name))?.info().map_err(program_err)?;
        Ok(Self {
            live: reopen(map_name::LIVE, live)?,
            mappings: tracer.take_map(map_name::VMM_MAPPINGS)?,
            procs: reopen(map_name::PROC_USAGE, procs)?,
            forget: RawTracePoint::from_program_info(info, name.into()).map_err(program_err)?,
        })
    }

    /// What the hash maps of live entries hold now: `LIVE`'s entries and
    /// `VMM_MAPPINGS`'s, then each process's current generation, read
    /// after them (an image's generation is never used again, so an entry
    /// of another is dead for good).
    pub fn read(&self) -> Hashed {
        let live = self.live.iter().flatten().map(|(key, a)| (key, a.generation)).collect();
        let mappings = self.mappings.iter().flatten().collect();
        let current = self.procs.iter().flatten().map(|(tgid, u)| (tgid, u.generation)).collect();
        Hashed { live, mappings, current }
    }

    /// Has the kernel forget `dead`: Some(1) if it did, Some(0) where the
    /// entry changed since it was read (or its image's release is under
    /// way), None if the kernel refused to run the program.
    pub fn forget(&self, dead: Dead) -> Option<u32> {
        let mut opts = RawTracePointRunOptions::new();
        let key_args = |key: LiveKey| [u64::from(key.tgid) | u64::from(key.ns) << 32, key.addr];
        match dead {
            Dead::Allocation { key, generation } => {
                [opts.args[0], opts.args[1]] = key_args(key);
                opts.args[2] = generation;
            }
            Dead::Mapping(key) => [opts.args[0], opts.args[1]] = key_args(key),
        }
        self.forget.test_run(opts).ok().map(|r| r.return_value)
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
