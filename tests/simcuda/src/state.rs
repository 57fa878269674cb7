//! The simulated card: devices, their capacity and live allocations.
use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, OnceLock},
};

use crate::cuda::{CUresult, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_NOT_INITIALIZED};

const DEFAULT_CAPACITY: u64 = 16 << 30;
const DEFAULT_DEVICES: i32 = 2;
/// Device address space: each device gets its own 1 TiB window, like UVA.
const VA_BASE: u64 = 0x7000_0000_0000;
const VA_WINDOW: u64 = 1 << 40;
const ALIGN: u64 = 512;
/// Pinned host allocations get addresses from here.
const HOST_BASE: u64 = 0x6000_0000_0000;

pub struct Device {
    pub used: u64,
    next_va: u64,
}

pub struct Card {
    pub capacity: u64,
    pub devices: Vec<Device>,
    /// Live allocations: address -> (device, bytes).
    pub live: HashMap<u64, (i32, u64)>,
    /// Pinned host memory: address -> bytes (allocated or registered).
    pub host: HashMap<u64, u64>,
    next_host: u64,
    /// Opaque handles (VMM, arrays, pools, imports) count up from here.
    next_handle: u64,
}

static CARD: OnceLock<Mutex<Card>> = OnceLock::new();

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// `cuInit`: sets the card up once per process.
pub fn init() {
    CARD.get_or_init(|| {
        let capacity = env_num("SIMCUDA_CAPACITY").unwrap_or(DEFAULT_CAPACITY);
        let n = env_num("SIMCUDA_DEVICES").map_or(DEFAULT_DEVICES, |n| n.clamp(1, 64) as i32);
        let devices = (0..n).map(|d| Device { used: 0, next_va: VA_BASE + d as u64 * VA_WINDOW }).collect();
        Mutex::new(Card {
            capacity,
            devices,
            live: HashMap::new(),
            host: HashMap::new(),
            next_host: HOST_BASE,
            next_handle: 0x5000_0000,
        })
    });
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
    card().map(|c| c.capacity).unwrap_or(0)
}

pub fn check_device(dev: i32) -> Result<(), CUresult> {
    let c = card()?;
    if dev < 0 || dev as usize >= c.devices.len() {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    Ok(())
}

impl Card {
    /// Reserves `bytes` on `dev`; `None` when the card is full.
    pub fn allocate(&mut self, dev: i32, bytes: u64) -> Option<u64> {
        let cap = self.capacity;
        let d = self.devices.get_mut(dev as usize)?;
        if bytes > cap - d.used {
            return None;
        }
        d.used += bytes;
        let addr = d.next_va;
        d.next_va += bytes.div_ceil(ALIGN).max(1) * ALIGN;
        self.live.insert(addr, (dev, bytes));
        Some(addr)
    }

    /// Releases the allocation at `addr`; `None` if there is none.
    pub fn release(&mut self, addr: u64) -> Option<(i32, u64)> {
        let (dev, bytes) = self.live.remove(&addr)?;
        self.devices[dev as usize].used -= bytes;
        Some((dev, bytes))
    }

    /// Takes `bytes` of `dev`'s capacity with no address (VMM physical
    /// memory, arrays); false when the card is full.
    pub fn reserve(&mut self, dev: i32, bytes: u64) -> bool {
        let cap = self.capacity;
        match self.devices.get_mut(dev as usize) {
            Some(d) if bytes <= cap - d.used => {
                d.used += bytes;
                true
            }
            _ => false,
        }
    }

    /// Gives back what [`Self::reserve`] took.
    pub fn unreserve(&mut self, dev: i32, bytes: u64) {
        if let Some(d) = self.devices.get_mut(dev as usize) {
            d.used -= bytes;
        }
    }

    /// A fresh pinned host address for `bytes`.
    pub fn host_alloc(&mut self, bytes: u64) -> u64 {
        let addr = self.next_host;
        self.next_host += bytes.div_ceil(4096).max(1) * 4096;
        self.host.insert(addr, bytes);
        addr
    }

    /// A fresh opaque handle.
    pub fn handle(&mut self) -> u64 {
        self.next_handle += 0x10;
        self.next_handle
    }
}
