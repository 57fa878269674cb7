//! The simulated card as this process sees it: its own address spaces,
//! live allocations and handles, and the card every process shares
//! (`simcard`: capacity, what each process holds on each device), which
//! decides whether an allocation fits.
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex, MutexGuard, OnceLock,
    },
};

pub use simcard::Use;
use simcard::{Config, Process};

use crate::cuda::{CUresult, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_UNKNOWN};

use crate::backing::{self, DEVICE_BASE, DEVICE_WINDOW, HOST_BASE, WINDOW};

/// Allocations' alignment on the device, as the driver's.
const ALIGN: u64 = 512;

pub struct Device {
    next_va: u64,
}

/// A live allocation of device (or managed) memory.
#[derive(Clone, Copy, Debug)]
pub struct Live {
    pub device: i32,
    pub bytes: u64,
    /// Whether the card was charged: managed memory is not (see
    /// [`Card::allocate`]).
    pub charged: bool,
    /// The memory pool it was made from, if any (pool.rs keeps its
    /// figures).
    pub pool: Option<u64>,
}

pub struct Card {
    pub devices: Vec<Device>,
    /// Live allocations by address.
    pub live: HashMap<u64, Live>,
    /// Pools' freed blocks, by (pool, device, aligned size): a pool hands
    /// its freed memory out again, as the driver's stream-ordered
    /// allocator does (an allocation of the size just freed gets the
    /// freed address back); everything else takes fresh addresses.
    pool_blocks: HashMap<(u64, i32, u64), Vec<u64>>,
    /// Pinned host memory: address -> bytes (allocated or registered).
    pub host: HashMap<u64, u64>,
    next_host: u64,
    /// Opaque handles (VMM, arrays, pools, imports) count up from here.
    next_handle: u64,
    /// The card every process shares.
    shared: simcard::Card,
    /// This process's slot on it, claimed at its first charge.
    slot: Option<usize>,
    process: Process,
}

static CARD: OnceLock<Mutex<Card>> = OnceLock::new();
/// Set in a child after fork: it is another process on the card.
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Charges (or with `take` false gives back) a context's own memory on
/// `dev`; false when the card has no room for it.
pub fn context_memory(dev: i32, take: bool) -> bool {
    let Ok(mut c) = card() else { return false };
    let cost = c.context_cost();
    if take {
        return c.charge(dev, cost, Use::Context);
    }
    c.uncharge(dev, cost, Use::Context);
    true
}

/// `cuInit`: maps the shared card once per process (`SIMCUDA_CARD`; a
/// card no running process uses is made as `SIMCUDA_CAPACITY`,
/// `SIMCUDA_DEVICES` and `SIMCUDA_CONTEXT_COST` say).
pub fn init() -> Result<(), CUresult> {
    // One thread at a time maps the card; the others find it made.
    static INIT: Mutex<()> = Mutex::new(());
    let _once = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if CARD.get().is_some() {
        return Ok(());
    }
    let path = simcard::path_from_env();
    let shared = simcard::Card::open(&path, Some(Config::from_env())).map_err(|e| {
        eprintln!("simcuda: cannot open the simulated card {}: {e}", path.display());
        CUDA_ERROR_UNKNOWN
    })?;
    // A program image that follows another by exec (same pid, same start
    // time) holds nothing of what the old image held.
    if let Ok(l) = shared.lock() {
        l.forget(Process::current());
    }
    let count = shared.config().devices as u64;
    backing::map(count)?;
    let devices = (0..count).map(|d| Device { next_va: DEVICE_BASE + d * DEVICE_WINDOW }).collect();
    // SAFETY: registers a handler that only stores to an atomic.
    unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    let _ = CARD.set(Mutex::new(Card {
        devices,
        live: HashMap::new(),
        pool_blocks: HashMap::new(),
        host: HashMap::new(),
        next_host: HOST_BASE,
        next_handle: 0x5000_0000,
        shared,
        slot: None,
        process: Process::current(),
    }));
    Ok(())
}

/// The card, or `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn card() -> Result<MutexGuard<'static, Card>, CUresult> {
    let m = CARD.get().ok_or(CUDA_ERROR_NOT_INITIALIZED)?;
    // A panicking test thread must not wedge the others.
    Ok(m.lock().unwrap_or_else(|p| p.into_inner()))
}

pub fn device_count() -> Option<i32> {
    card().ok().map(|c| c.devices.len() as i32)
}

pub fn capacity() -> u64 {
    card().map(|c| c.shared.config().capacity).unwrap_or(0)
}

pub fn check_device(dev: i32) -> Result<(), CUresult> {
    let c = card()?;
    if dev < 0 || dev as usize >= c.devices.len() {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    Ok(())
}

impl Card {
    /// This process's slot on the shared card (claimed anew in a forked
    /// child, which is another process).
    fn slot(&mut self) -> Option<usize> {
        if FORKED.swap(false, Ordering::Relaxed) {
            (self.slot, self.process) = (None, Process::current());
        }
        if self.slot.is_none() {
            self.slot = self.shared.lock().ok()?.claim(self.process);
        }
        self.slot
    }

    /// Charges `bytes` of `dev` to this process; false when the card is
    /// full.
    pub fn charge(&mut self, dev: i32, bytes: u64, what: Use) -> bool {
        let Some(slot) = self.slot() else { return false };
        self.shared.charge(slot, dev as usize, bytes, what)
    }

    /// Gives back what [`Self::charge`] took.
    pub fn uncharge(&mut self, dev: i32, bytes: u64, what: Use) {
        if let Some(slot) = self.slot() {
            self.shared.uncharge(slot, dev as usize, bytes, what);
        }
    }

    /// Bytes every running process holds on `dev` (what exited ones held
    /// given back first, as a driver's figure would not count them).
    pub fn used(&self, dev: i32) -> u64 {
        if let Ok(l) = self.shared.lock() {
            l.sweep();
        }
        self.shared.used(dev as usize)
    }

    pub fn capacity(&self) -> u64 {
        self.shared.config().capacity
    }

    /// What a context costs the card (its own memory on its device).
    pub fn context_cost(&self) -> u64 {
        self.shared.config().context_cost
    }

    /// Reserves `bytes` on `dev` (charged to the card unless `managed`);
    /// `None` when the card is full. Managed memory lives where it is
    /// touched and a driver lets it exceed the device, so, untouched here,
    /// it takes none of the card (nor of NVML's figures), as on a real one.
    /// `pool`: the pool a pool's allocation is made from, which gives a
    /// block it freed of the same aligned size back first.
    pub fn allocate(&mut self, dev: i32, bytes: u64, managed: bool, pool: Option<u64>) -> Option<u64> {
        let end = DEVICE_BASE + (dev as u64 + 1) * DEVICE_WINDOW;
        let next_va = self.devices.get(dev.max(0) as usize).filter(|_| dev >= 0)?.next_va;
        let span = bytes.div_ceil(ALIGN).max(1) * ALIGN;
        let blocks = pool.map(|p| (p, dev, span));
        let reused = blocks.and_then(|b| self.pool_blocks.get_mut(&b)?.pop());
        let fits = reused.is_some() || next_va + span <= end;
        if !fits || !(managed || self.charge(dev, bytes, Use::Memory)) {
            if let (Some(addr), Some(b)) = (reused, blocks) {
                self.pool_blocks.entry(b).or_default().push(addr);
            }
            return None;
        }
        let addr = reused.unwrap_or_else(|| {
            self.devices[dev as usize].next_va = next_va + span;
            next_va
        });
        self.live.insert(addr, Live { device: dev, bytes, charged: !managed, pool });
        Some(addr)
    }

    /// Releases the allocation at `addr`; `None` if there is none.
    pub fn release(&mut self, addr: u64) -> Option<Live> {
        let live = self.live.remove(&addr)?;
        backing::give_back(addr, live.bytes);
        if live.charged {
            self.uncharge(live.device, live.bytes, Use::Memory);
        }
        Some(live)
    }

    /// Gives a pool's block at `addr`, released (`live`), back to its pool
    /// to hand out again: only once the pool's own figures forgot it
    /// (`pool::forget`), or another thread's allocation of it could be
    /// forgotten in its place.
    pub fn reuse_pool_block(&mut self, addr: u64, live: &Live) {
        if let Some(pool) = live.pool {
            let span = live.bytes.div_ceil(ALIGN).max(1) * ALIGN;
            self.pool_blocks.entry((pool, live.device, span)).or_default().push(addr);
        }
    }

    /// Takes `bytes` of `dev`'s capacity with no address (VMM physical
    /// memory, arrays); false when the card is full.
    pub fn reserve(&mut self, dev: i32, bytes: u64) -> bool {
        dev >= 0 && (dev as usize) < self.devices.len() && self.charge(dev, bytes, Use::Memory)
    }

    /// Gives back what [`Self::reserve`] took.
    pub fn unreserve(&mut self, dev: i32, bytes: u64) {
        self.uncharge(dev, bytes, Use::Memory);
    }

    /// A fresh pinned host address for `bytes`, real memory; `None` when
    /// the host window is spent.
    pub fn host_alloc(&mut self, bytes: u64) -> Option<u64> {
        let addr = self.next_host;
        let next = addr + bytes.div_ceil(4096).max(1) * 4096;
        if next > HOST_BASE + WINDOW {
            return None;
        }
        self.next_host = next;
        self.host.insert(addr, bytes);
        Some(addr)
    }

    /// Forgets the pinned host memory at `addr` (allocated or registered:
    /// only what this library allocated has its pages given back).
    pub fn host_free(&mut self, addr: u64) -> Option<u64> {
        let bytes = self.host.remove(&addr)?;
        if (HOST_BASE..HOST_BASE + WINDOW).contains(&addr) {
            backing::give_back(addr, bytes);
        }
        Some(bytes)
    }

    /// Whether `[addr, addr + len)` is memory a copy may touch: inside the
    /// card's windows or pinned (registered) host memory.
    pub fn touchable(&self, addr: u64, len: u64) -> bool {
        backing::inside(self.devices.len() as u64, addr, len)
            || self.host.iter().any(|(&b, &l)| addr >= b && addr.saturating_add(len) <= b + l)
    }

    /// A fresh opaque handle.
    pub fn handle(&mut self) -> u64 {
        self.next_handle += 0x10;
        self.next_handle
    }
}
