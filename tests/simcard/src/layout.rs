//! The card as it lies in the shared file. Every field is an atomic of a
//! fixed width (the same bytes as the plain integer), so any process may
//! read or change any of them at any time without a data race: counters
//! change lock-free, the rest only under the file's lock, and no process
//! ever holds a `&mut` to the mapping.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// "SIMCARD" and a layout version: a file with anything else is made anew.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SIMCARD3");
/// Devices a card can have.
pub const MAX_DEVICES: usize = 16;
/// Processes that can hold memory on the card at once.
pub const MAX_PROCESSES: usize = 256;

/// What the card is: set when it is made, kept while processes use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Bytes per device.
    pub capacity: u64,
    pub devices: u32,
    /// What each context costs the card on its device.
    pub context_cost: u64,
}

/// One process holding memory on the card.
#[repr(C)]
pub struct Slot {
    /// 0: a free slot.
    pub pid: AtomicU32,
    pub _pad: u32,
    /// The process's start time (clock ticks after boot, /proc/PID/stat):
    /// a reused pid is another process.
    pub start: AtomicU64,
    /// Bytes its allocations hold, per device.
    pub memory: [AtomicU64; MAX_DEVICES],
    /// Bytes its contexts hold, per device.
    pub contexts: [AtomicU64; MAX_DEVICES],
}

/// The whole file.
#[repr(C)]
pub struct Board {
    pub magic: AtomicU64,
    pub capacity: AtomicU64,
    pub devices: AtomicU64,
    pub context_cost: AtomicU64,
    /// Bytes held on each device by every process (memory and contexts).
    pub used: [AtomicU64; MAX_DEVICES],
    pub slots: [Slot; MAX_PROCESSES],
}

impl Slot {
    pub fn pid(&self) -> u32 {
        self.pid.load(Relaxed)
    }

    pub fn start(&self) -> u64 {
        self.start.load(Relaxed)
    }

    /// Everything the process holds on `dev`.
    pub fn total(&self, dev: usize) -> u64 {
        self.memory[dev].load(Relaxed) + self.contexts[dev].load(Relaxed)
    }

    /// Makes the slot free (its counters zero).
    pub fn clear(&self) {
        self.pid.store(0, Relaxed);
        self.start.store(0, Relaxed);
        for c in self.memory.iter().chain(&self.contexts) {
            c.store(0, Relaxed);
        }
    }
}

impl Board {
    pub fn config(&self) -> Config {
        Config {
            capacity: self.capacity.load(Relaxed),
            devices: self.devices.load(Relaxed) as u32,
            context_cost: self.context_cost.load(Relaxed),
        }
    }

    /// Makes the card anew: nothing held.
    pub fn reset(&self, config: Config) {
        self.capacity.store(config.capacity, Relaxed);
        self.devices.store(u64::from(config.devices), Relaxed);
        self.context_cost.store(config.context_cost, Relaxed);
        for u in &self.used {
            u.store(0, Relaxed);
        }
        for s in &self.slots {
            s.clear();
        }
        self.magic.store(MAGIC, std::sync::atomic::Ordering::Release);
    }
}
