//! The kernel's live table (`LIVE_TABLE`, gpumem-ebpf's account/live.rs),
//! read through shared mappings of the array a window at a time
//! (`window`): one pass over its memory instead of a system call per
//! slot.
mod window;

use std::collections::HashMap;

use aya::maps::{Map, MapData};
use gpumem_common::{map_name, slot_state, LiveAlloc, LiveKey, LiveSlot, LIVE_SLOTS};

use self::window::{slots_per_window, Window};
use super::error::BpfError;

/// The live table's map.
pub struct LiveTable {
    map: Map,
}

impl LiveTable {
    /// The object's `LIVE_TABLE`.
    pub fn of(map: Map) -> Result<Self, BpfError> {
        match map {
            Map::Array(_) => Ok(Self { map }),
            _ => {
                let e = std::io::Error::other("not an array map");
                Err(BpfError::Map {
                    name: map_name::LIVE_TABLE,
                    source: Box::new(aya::maps::MapError::IoError(e)),
                })
            }
        }
    }

    /// Every allocation the table holds, each copied out whole (a slot
    /// changing while it is read is read again, and skipped if it keeps
    /// changing). Where a window cannot be mapped, the table is read a
    /// slot at a time (a system call each, some 50 ms), and the agent
    /// says so.
    pub fn held(&self) -> Vec<(LiveKey, LiveAlloc)> {
        let mut out = Vec::new();
        let each = |w: &Window, out: &mut Vec<_>| {
            out.extend((0..w.slots).filter_map(|i| w.read(i)).map(|(_, key, live)| (key, live)));
        };
        match self.each_window(&mut |w| each(w, &mut out)) {
            Ok(()) => out,
            Err(e) => {
                tracing::warn!("{e}: reading the live table a slot at a time");
                self.held_by_lookup()
            }
        }
    }

    /// Empties the slots of process images that exited or exec'd (their
    /// charges were released with them; left, they would fill the table
    /// on a host that runs processes for months). `current` gives each
    /// process's current image (`ProcUsage::generation`, raw: a released
    /// one is not current), read after the slots: a slot filled for an
    /// image that was current then and is not now is dead for good (an
    /// image's generation is never used again), and emptied only if it
    /// has not changed since it was read (compare-exchange on its state
    /// word, the kernel's own protocol). How many were emptied.
    pub fn reclaim(&self, current: impl FnOnce() -> HashMap<u32, u64>) -> Result<u64, BpfError> {
        let mut seen: Vec<(usize, u64, u32, u64)> = Vec::new();
        self.each_window(&mut |w| {
            for i in 0..w.slots {
                if let Some((state, key, live)) = w.read(i) {
                    seen.push((w.first + i, state, key.tgid, live.generation));
                }
            }
        })?;
        let current = current();
        seen.retain(|&(_, _, tgid, generation)| current.get(&tgid) != Some(&generation));
        if seen.is_empty() {
            return Ok(0);
        }
        let (data, per) = (self.data(), slots_per_window());
        let mut emptied = 0;
        for chunk in seen.chunk_by(|a, b| a.0 / per == b.0 / per) {
            let first = chunk[0].0 / per * per;
            let w = Window::map(data, first, per, true)?;
            emptied +=
                chunk.iter().filter(|&&(index, state, ..)| w.empty_if(index - first, state)).count() as u64;
        }
        Ok(emptied)
    }

    /// Runs `f` on each window of the table in turn, mapped read-only.
    fn each_window(&self, f: &mut dyn FnMut(&Window)) -> Result<(), BpfError> {
        let per = slots_per_window();
        for first in (0..LIVE_SLOTS as usize).step_by(per) {
            f(&Window::map(self.data(), first, per, false)?);
        }
        Ok(())
    }

    fn data(&self) -> &MapData {
        match &self.map {
            Map::Array(data) => data,
            _ => unreachable!("checked in `of`"),
        }
    }

    fn held_by_lookup(&self) -> Vec<(LiveKey, LiveAlloc)> {
        let array = match aya::maps::Array::<_, LiveSlot>::try_from(&self.map) {
            Ok(array) => array,
            Err(e) => {
                tracing::warn!("reading the live table: {e}: its allocations are not counted");
                return Vec::new();
            }
        };
        array
            .iter()
            .flatten()
            .filter(|s| s.state & slot_state::TAG == slot_state::FULL)
            .map(|s| (s.key, s.live))
            .collect()
    }
}
