//! The kernel's live table (`LIVE_TABLE`, gpumem-ebpf's account/live.rs),
//! read through a read-only shared mapping of the array: one pass over
//! its memory instead of a system call per slot.
use std::{
    os::fd::{AsFd, AsRawFd},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};

use aya::maps::{Map, MapData};
use gpumem_common::{map_name, slot_state, LiveAlloc, LiveKey, LiveSlot, LIVE_SLOTS};

use super::error::BpfError;

/// The live table, mapped.
pub struct LiveTable {
    /// Kept open for as long as it is mapped.
    _map: MapData,
    base: NonNull<LiveSlot>,
    len: usize,
}

// SAFETY: the mapping is read only and shared with the kernel, which
// writes it under its own protocol; readers copy slots out (`slots`).
unsafe impl Send for LiveTable {}

impl LiveTable {
    /// Maps `map` (the object's `LIVE_TABLE`).
    pub fn map(map: Map) -> Result<Self, BpfError> {
        let name = map_name::LIVE_TABLE;
        let Map::Array(data) = map else {
            let e = std::io::Error::other("not an array map");
            return Err(BpfError::Map { name, source: Box::new(aya::maps::MapError::IoError(e)) });
        };
        let len = LIVE_SLOTS as usize * size_of::<LiveSlot>();
        // SAFETY: a new shared read-only mapping of the map's fd; the
        // kernel sizes an mmapable array's mapping to its values.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let io_error = std::io::Error::last_os_error();
            let e = aya::sys::SyscallError { call: "mmap", io_error };
            return Err(BpfError::Map { name, source: Box::new(aya::maps::MapError::SyscallError(e)) });
        }
        let base = NonNull::new(p.cast::<LiveSlot>()).expect("mmap succeeded");
        Ok(Self { _map: data, base, len })
    }

    /// Every allocation the table holds, each copied out whole: a slot
    /// changing while it is read (its state word different after) is read
    /// again, and skipped if it keeps changing.
    pub fn held(&self) -> Vec<(LiveKey, LiveAlloc)> {
        let mut out = Vec::new();
        for i in 0..LIVE_SLOTS as usize {
            // SAFETY: `i` is within the mapping.
            let slot = unsafe { self.base.as_ptr().add(i) };
            if let Some(found) = read_slot(slot) {
                out.push(found);
            }
        }
        out
    }
}

/// A consistent copy of a full slot, or None (empty, or changing).
fn read_slot(slot: *const LiveSlot) -> Option<(LiveKey, LiveAlloc)> {
    // SAFETY: the state word is 8-byte aligned in the mapping, and only
    // ever changed atomically by the kernel.
    let state = unsafe { AtomicU64::from_ptr(std::ptr::addr_of!((*slot).state).cast_mut()) };
    for _ in 0..4 {
        let before = state.load(Ordering::Acquire);
        if before & slot_state::TAG != slot_state::FULL {
            return None;
        }
        // SAFETY: within the mapping; a torn copy is detected below.
        let (key, live) =
            unsafe { (std::ptr::read_volatile(&(*slot).key), std::ptr::read_volatile(&(*slot).live)) };
        std::sync::atomic::fence(Ordering::Acquire);
        if state.load(Ordering::Relaxed) == before {
            return Some((key, live));
        }
    }
    None
}

impl Drop for LiveTable {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
