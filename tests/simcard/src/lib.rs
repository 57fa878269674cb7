//! The simulated card, shared by every process on the host as a real card
//! is: its capacity, and what each process holds on each device (memory
//! and contexts), in a file every process maps (`SIMCUDA_CARD`, default
//! `/dev/shm/simcuda-card`). The simulated driver (`libcuda.so.1`) charges
//! and uncharges it; the simulated NVML (`libnvidia-ml.so.1`) reads it;
//! tests read it as the card's own count.
//!
//! Charges are atomic adds on the shared counters (an allocation costs
//! what it would on a real driver's bookkeeping, not a system call), the
//! device's total checked against the capacity by compare-and-swap, so
//! racing processes never pass it together. Rarer changes (a process's
//! first charge claims a slot; giving back what exited processes held;
//! making the card anew) take an exclusive `flock` of the file (and a
//! mutex, for the process's own threads), so a process that dies
//! mid-change leaves no lock behind. Every field of the mapping is an
//! atomic, so no access races, locked or not. A process that exits
//! without freeing gives its memory back at the next look at the card (its
//! slot's pid no longer runs with that start time), as a real driver does
//! at exit.
mod layout;
mod locked;
mod process;

use std::{
    fs::OpenOptions,
    io,
    os::{
        fd::AsRawFd,
        unix::fs::{OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

use layout::Board;
pub use layout::{Config, MAX_DEVICES, MAX_PROCESSES};
pub use locked::Locked;
pub use process::Process;

/// Defaults: a 16 GiB card with 2 devices; each context costs 2 MiB.
pub const DEFAULT: Config = Config { capacity: 16 << 30, devices: 2, context_cost: 2 << 20 };

/// What a charge is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// An allocation (device, array, VMM, pool memory).
    Memory,
    /// A context's own memory.
    Context,
}

/// The card file, mapped.
pub struct Card {
    file: std::fs::File,
    board: *const Board,
    /// This process's threads take the card's lock one at a time (a flock
    /// belongs to the open file, which they share).
    local: Mutex<()>,
}

// SAFETY: the mapping is only reached through `&Board`, whose fields are
// all atomics; it lives until Drop.
unsafe impl Send for Card {}
// SAFETY: as above.
unsafe impl Sync for Card {}

impl Config {
    /// The card `SIMCUDA_CAPACITY`, `SIMCUDA_DEVICES` (1 to 16) and
    /// `SIMCUDA_CONTEXT_COST` ask for, defaults for what they leave out.
    pub fn from_env() -> Self {
        let num = |name: &str| std::env::var(name).ok()?.trim().parse::<u64>().ok();
        Self {
            capacity: num("SIMCUDA_CAPACITY").unwrap_or(DEFAULT.capacity),
            devices: num("SIMCUDA_DEVICES")
                .map_or(DEFAULT.devices, |n| n.clamp(1, MAX_DEVICES as u64) as u32),
            context_cost: num("SIMCUDA_CONTEXT_COST").unwrap_or(DEFAULT.context_cost),
        }
    }
}

/// The card file: `SIMCUDA_CARD`, else `/dev/shm/simcuda-card` (or
/// `/tmp/simcuda-card` where there is no /dev/shm).
pub fn path_from_env() -> PathBuf {
    if let Some(p) = std::env::var_os("SIMCUDA_CARD") {
        return PathBuf::from(p);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm } else { Path::new("/tmp") }.join("simcuda-card")
}

impl Card {
    /// Maps the card at `path`, making it if there is none (or what is
    /// there is not a card). With `config`, a card no running process
    /// holds anything on is made anew as `config` asks, where it differs:
    /// the first process decides, as the card's owner would.
    pub fn open(path: &Path, config: Option<Config>) -> io::Result<Self> {
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o666).open(path)?;
        let size = std::mem::size_of::<Board>();
        let card = {
            let lock = flock(&file)?;
            if file.metadata()?.len() < size as u64 {
                file.set_len(size as u64)?;
                // Any user's processes share the card, as any user's share
                // a GPU: not what the umask leaves of 0666.
                let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
            }
            // SAFETY: a shared read-write mapping of `size` bytes of a file
            // at least that long; unmapped in Drop, never moved.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            drop(lock);
            Card { file, board: p.cast_const().cast(), local: Mutex::new(()) }
        };
        card.lock()?.settle(config);
        Ok(card)
    }

    /// The board.
    fn board(&self) -> &Board {
        // SAFETY: a mapping of a whole `Board` (page-aligned, so every
        // atomic is aligned) that lives as long as `self`; only shared
        // references are ever made, and every field is an atomic.
        unsafe { &*self.board }
    }

    /// The card, locked until the guard is dropped (against the other
    /// processes by the file's flock, against this one's other threads by
    /// a mutex).
    pub fn lock(&self) -> io::Result<Locked<'_>> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Locked::new(self.board(), local, flock(&self.file)?))
    }

    /// What the card is (fixed while any process holds memory on it).
    pub fn config(&self) -> Config {
        self.board().config()
    }

    /// Bytes held on `dev` by every process.
    pub fn used(&self, dev: usize) -> u64 {
        self.board().used.get(dev).map_or(0, |u| u.load(Ordering::Acquire))
    }

    /// Takes `bytes` of `dev` for the process in `slot` (from
    /// [`Locked::claim`]); false when they do not fit, even after giving
    /// back what exited processes held.
    pub fn charge(&self, slot: usize, dev: usize, bytes: u64, what: Use) -> bool {
        if dev >= (self.config().devices as usize).min(MAX_DEVICES) || slot >= MAX_PROCESSES {
            return false;
        }
        if !self.take(dev, bytes) {
            if let Ok(l) = self.lock() {
                l.sweep();
            }
            if !self.take(dev, bytes) {
                return false;
            }
        }
        self.held(slot, dev, what).fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Gives back what [`Self::charge`] took.
    pub fn uncharge(&self, slot: usize, dev: usize, bytes: u64, what: Use) {
        if dev >= MAX_DEVICES || slot >= MAX_PROCESSES {
            return;
        }
        // No more than the process holds: a forked child may free what its
        // parent allocated (the driver's state was copied).
        let before = self
            .held(slot, dev, what)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| Some(h.saturating_sub(bytes)));
        let taken = before.unwrap_or(0).min(bytes);
        self.board().used[dev].fetch_sub(taken, Ordering::AcqRel);
    }

    /// Adds `bytes` to `dev`'s total unless that passes the capacity.
    fn take(&self, dev: usize, bytes: u64) -> bool {
        let capacity = self.config().capacity;
        self.board().used[dev]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (bytes <= capacity.saturating_sub(u)).then_some(u + bytes)
            })
            .is_ok()
    }

    fn held(&self, slot: usize, dev: usize, what: Use) -> &AtomicU64 {
        let s = &self.board().slots[slot];
        match what {
            Use::Memory => &s.memory[dev],
            Use::Context => &s.contexts[dev],
        }
    }
}

impl Drop for Card {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, of that size; no reference
        // to it outlives `self`.
        unsafe { libc::munmap(self.board.cast_mut().cast(), std::mem::size_of::<Board>()) };
    }
}

/// An exclusive flock of `file`, released when dropped.
fn flock(file: &std::fs::File) -> io::Result<FlockGuard<'_>> {
    // SAFETY: flock on an open descriptor.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FlockGuard(file))
}

pub(crate) struct FlockGuard<'a>(&'a std::fs::File);

impl Drop for FlockGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking the descriptor locked in `flock`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Device `dev`'s name, as both simulated libraries give it.
pub fn device_name(dev: u32) -> String {
    format!("simcuda device {dev}")
}

/// Device `dev`'s UUID, as both simulated libraries give it (NVML's text
/// form; the driver's 16 bytes are the hex digits).
pub fn device_uuid(dev: u32) -> String {
    format!("GPU-5157c0da-0000-4000-8000-{dev:012x}")
}

#[cfg(test)]
mod tests;
