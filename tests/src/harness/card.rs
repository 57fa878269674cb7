//! The simulated card, as tests see it: a card of the test's own (a file
//! in its scratch directory, of the capacity it asks for) that the
//! workloads given its environment share, and the card's own count of
//! what each process holds: the second ground truth beside the workload's.
use std::path::PathBuf;

use simcard::Card;

use super::env::scratch;

/// A card of the test's own, removed when dropped.
pub struct SimCard {
    path: PathBuf,
    capacity: String,
    _dir: tempfile::TempDir,
}

impl SimCard {
    /// A card whose devices hold `capacity` bytes each.
    pub fn new(capacity: u64) -> Self {
        let dir = scratch();
        Self { path: dir.path().join("card"), capacity: capacity.to_string(), _dir: dir }
    }

    /// What a workload (or the agent, for NVML) needs to use this card.
    pub fn env(&self) -> Vec<(&str, &str)> {
        vec![("SIMCUDA_CARD", self.path.to_str().unwrap()), ("SIMCUDA_CAPACITY", &self.capacity)]
    }

    /// What the card counts for process `pid` on `device`: (allocations,
    /// contexts).
    pub fn held(&self, pid: u32, device: usize) -> (u64, u64) {
        held_on(&self.path, pid, device)
    }
}

/// What the host's card (the simulated driver's default) counts for
/// process `pid` on `device`: (allocations, contexts).
pub fn card_held(pid: u32, device: usize) -> (u64, u64) {
    held_on(&simcard::path_from_env(), pid, device)
}

fn held_on(path: &std::path::Path, pid: u32, device: usize) -> (u64, u64) {
    let card = Card::open(path, None)
        .unwrap_or_else(|e| panic!("opening the simulated card {}: {e}", path.display()));
    let held = card.lock().expect("locking the simulated card").held(pid, device);
    held
}

/// The context cost of a card made with the defaults (what each context
/// a workload makes costs the card).
pub const CONTEXT_COST: u64 = simcard::DEFAULT.context_cost;
