//! A window of the live table mapped into the agent: a few hundred KiB at
//! a time, so that reading the table's 5.8 MB never counts in the agent's
//! resident memory at once, and a slot read whole or not at all.
use std::{
    os::fd::{AsFd, AsRawFd},
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};

use aya::maps::MapData;
use gpumem_common::{map_name, slot_state, LiveAlloc, LiveKey, LiveSlot, LIVE_SLOTS};

use crate::bpf::error::BpfError;

/// Slots per window: a whole number of pages (a mapping's offset is one)
/// holding whole slots, at least 4,096 slots (352 KiB with 4 KiB pages).
pub fn slots_per_window() -> usize {
    // SAFETY: plain libc call.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096);
    // Slots are 88 bytes, 8 times 11: `page / 8` of them fill 11 pages.
    let unit = page / 8;
    let window = unit * 4096usize.div_ceil(unit);
    window.min(LIVE_SLOTS as usize)
}

/// A shared mapping of `slots` slots from slot `first`, unmapped when
/// dropped.
pub struct Window {
    pub first: usize,
    pub slots: usize,
    base: NonNull<LiveSlot>,
    len: usize,
}

impl Window {
    /// Maps slots `first..first + slots` of `map` (`first` a multiple of
    /// [`slots_per_window`]); writable only to empty dead slots.
    pub fn map(map: &MapData, first: usize, slots: usize, writable: bool) -> Result<Self, BpfError> {
        let slot = size_of::<LiveSlot>();
        let len = slots * slot;
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let offset = libc::off_t::try_from(first * slot).expect("the table is a few MB");
        // SAFETY: a new shared mapping of the map's fd, at a page offset
        // (see `slots_per_window`); the kernel maps an mmapable array's
        // values from offset 0, each `size_of::<LiveSlot>()` (a multiple
        // of 8) apart.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            let io_error = std::io::Error::last_os_error();
            let e = aya::sys::SyscallError { call: "mmap", io_error };
            let source = Box::new(aya::maps::MapError::SyscallError(e));
            return Err(BpfError::Map { name: map_name::LIVE_TABLE, source });
        }
        let base = NonNull::new(p.cast::<LiveSlot>()).expect("mmap succeeded");
        Ok(Self { first, slots, base, len })
    }

    /// Slot `first + i`'s copy, with the state word it was read under,
    /// when it is full (see [`read_slot`]).
    pub fn read(&self, i: usize) -> Option<(u64, LiveKey, LiveAlloc)> {
        debug_assert!(i < self.slots);
        // SAFETY: `i` is within the mapping.
        read_slot(unsafe { self.base.as_ptr().add(i) })
    }

    /// Empties slot `first + i` if its state word is still `seen` (full),
    /// moving its sequence on as a claim would; whether it did. The
    /// window must be writable.
    pub fn empty_if(&self, i: usize, seen: u64) -> bool {
        debug_assert!(i < self.slots);
        // SAFETY: `i` is within the mapping, writable (the caller's promise).
        let word = unsafe { state_word(self.base.as_ptr().add(i)) };
        let empty = slot_state::released(slot_state::claimed(seen), slot_state::EMPTY);
        word.compare_exchange(seen, empty, Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// A consistent copy of a full slot with the state word it was read
/// under, or None (empty, claimed, or changing while read four times).
pub fn read_slot(slot: *const LiveSlot) -> Option<(u64, LiveKey, LiveAlloc)> {
    // SAFETY: the caller's slot, within a mapping or its own.
    let state = unsafe { state_word(slot) };
    for _ in 0..4 {
        let before = state.load(Ordering::Acquire);
        if before & slot_state::TAG != slot_state::FULL {
            return None;
        }
        // SAFETY: as above; a torn copy is detected below.
        let (key, live) =
            unsafe { (std::ptr::read_volatile(&(*slot).key), std::ptr::read_volatile(&(*slot).live)) };
        std::sync::atomic::fence(Ordering::Acquire);
        if state.load(Ordering::Relaxed) == before {
            return Some((before, key, live));
        }
    }
    None
}

/// The state word of `slot`, as an atomic (the kernel changes it by
/// compare-exchange, and ends each of its claims by a release store:
/// gpumem-ebpf's account/live.rs).
///
/// # Safety
/// `slot` points to a slot in a live mapping of the table (8-byte aligned:
/// slots are 88 bytes from a page boundary), or to a `LiveSlot` of the
/// caller's; the word is written only through the atomic, and only where
/// the mapping is writable.
unsafe fn state_word<'a>(slot: *const LiveSlot) -> &'a AtomicU64 {
    // SAFETY: the caller's promise.
    unsafe { AtomicU64::from_ptr(std::ptr::addr_of!((*slot).state).cast_mut()) }
}

#[cfg(test)]
mod tests {
    use gpumem_common::{kind, ns};

    use super::*;

    #[test]
    fn a_full_slot_is_read_and_others_are_not() {
        let key = LiveKey { tgid: 7, ns: ns::DEVICE_PTR, addr: 0x7000 };
        let live = LiveAlloc { size: 4096, kind: kind::DEVICE, ..Default::default() };
        let full = slot_state::released(slot_state::claimed(0), slot_state::FULL);
        let mut slot = LiveSlot { state: full, key, live };
        assert_eq!(read_slot(&slot), Some((full, key, live)));
        for state in
            [slot_state::EMPTY, slot_state::claimed(full), slot_state::released(slot_state::claimed(full), 0)]
        {
            slot.state = state;
            assert_eq!(read_slot(&slot), None, "state {state:#x}");
        }
    }

    #[test]
    fn a_window_is_whole_pages_of_whole_slots_and_divides_the_table() {
        let w = slots_per_window();
        assert!(w >= 4096 || w == LIVE_SLOTS as usize);
        assert_eq!(w * size_of::<LiveSlot>() % 4096, 0);
        assert_eq!(LIVE_SLOTS as usize % w, 0);
    }
}
