//! The card as it lies in the shared file: fixed-width integers and
//! arrays only, so every process (and both simulated libraries) reads the
//! same bytes the same way.

/// "SIMCARD" and a layout version: a file with anything else is made anew.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SIMCARD2");
/// Devices a card can have.
pub const MAX_DEVICES: usize = 16;
/// Processes that can hold memory on the card at once.
pub const MAX_PROCESSES: usize = 256;

/// What the card is: set when it is made, kept while processes use it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Bytes per device.
    pub capacity: u64,
    pub devices: u32,
    pub _pad: u32,
    /// What each context costs the card on its device.
    pub context_cost: u64,
}

/// One process holding memory on the card.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// 0: a free slot.
    pub pid: u32,
    pub _pad: u32,
    /// The process's start time (clock ticks after boot, /proc/PID/stat):
    /// a reused pid is another process.
    pub start: u64,
    /// Bytes its allocations hold, per device.
    pub memory: [u64; MAX_DEVICES],
    /// Bytes its contexts hold, per device.
    pub contexts: [u64; MAX_DEVICES],
}

/// The whole file.
#[repr(C)]
pub struct Board {
    pub magic: u64,
    pub config: Config,
    /// Bytes held on each device by every process (memory and contexts).
    pub used: [u64; MAX_DEVICES],
    pub slots: [Slot; MAX_PROCESSES],
}

impl Slot {
    pub const FREE: Self =
        Self { pid: 0, _pad: 0, start: 0, memory: [0; MAX_DEVICES], contexts: [0; MAX_DEVICES] };

    /// Everything the process holds on `dev`.
    pub fn total(&self, dev: usize) -> u64 {
        self.memory[dev] + self.contexts[dev]
    }
}

impl Board {
    /// Makes the card anew: nothing held.
    pub fn reset(&mut self, config: Config) {
        self.magic = MAGIC;
        self.config = config;
        self.used = [0; MAX_DEVICES];
        self.slots = [Slot::FREE; MAX_PROCESSES];
    }
}
