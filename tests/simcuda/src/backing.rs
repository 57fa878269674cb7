//! Real memory behind every address the simulated card hands out, so
//! clients that write into what they allocate (numba-cuda's pinned, mapped
//! and managed arrays, copies to and from the device) run unmodified.
//!
//! At `cuInit` each window (one per device, one for pinned host memory,
//! one for VMM reservations) is mapped once, readable and writable, with
//! `MAP_NORESERVE`: nothing is committed until a page is touched, so a
//! test that allocates gigabytes and touches none costs nothing, and an
//! allocation stays one address bump (the bench's driver cost unchanged).
//! A freed allocation of at least [`GIVE_BACK`] bytes gives its pages back.
use std::ffi::c_void;

use crate::cuda::{CUresult, CUDA_ERROR_UNKNOWN};

/// Device `d`'s addresses: `[DEVICE_BASE + d * DEVICE_WINDOW, + DEVICE_WINDOW)`.
pub const DEVICE_BASE: u64 = 0x7000_0000_0000;
/// 256 GiB each: the card's 16 possible devices fit below the stacks.
pub const DEVICE_WINDOW: u64 = 1 << 38;
/// Pinned host memory the driver allocates (and host pools').
pub const HOST_BASE: u64 = 0x6000_0000_0000;
/// VMM address reservations.
pub const VMM_BASE: u64 = 0x6800_0000_0000;
/// The host and VMM windows' size.
pub const WINDOW: u64 = 1 << 40;
/// Frees of at least this many bytes return their pages at once; smaller
/// ones keep them until exit (only a pool hands an address out again:
/// its own freed block, see `state::Card::allocate`).
pub const GIVE_BACK: u64 = 1 << 20;

/// The windows of a card with `devices` devices.
pub fn windows(devices: u64) -> Vec<(u64, u64)> {
    let mut w: Vec<(u64, u64)> =
        (0..devices).map(|d| (DEVICE_BASE + d * DEVICE_WINDOW, DEVICE_WINDOW)).collect();
    w.push((HOST_BASE, WINDOW));
    w.push((VMM_BASE, WINDOW));
    w
}

/// Maps every window, once per process (a forked child inherits them);
/// on failure none stays mapped.
pub fn map(devices: u64) -> Result<(), CUresult> {
    let all = windows(devices);
    for (i, &(base, len)) in all.iter().enumerate() {
        // SAFETY: a fixed mapping that refuses to replace anything already
        // there (MAP_FIXED_NOREPLACE), so no memory of the process is touched.
        let p = unsafe {
            libc::mmap(
                base as *mut c_void,
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p as u64 != base {
            let e = std::io::Error::last_os_error();
            for &(b, l) in &all[..i] {
                // SAFETY: a window mapped just above by this function.
                unsafe { libc::munmap(b as *mut c_void, l as usize) };
            }
            eprintln!(
                "simcuda: cannot map the simulated card's memory window {base:#x}+{len:#x}: {e} (another mapping is there, or the kernel refuses MAP_NORESERVE under strict overcommit)"
            );
            return Err(CUDA_ERROR_UNKNOWN);
        }
    }
    Ok(())
}

/// Whether `[addr, addr + len)` lies inside one window: memory a copy may
/// read or write.
pub fn inside(devices: u64, addr: u64, len: u64) -> bool {
    windows(devices).iter().any(|&(base, size)| addr >= base && addr.saturating_add(len) <= base + size)
}

/// Gives a freed allocation's pages back (large ones only, see [`GIVE_BACK`]).
pub fn give_back(addr: u64, len: u64) {
    if len < GIVE_BACK {
        return;
    }
    // Only whole pages inside the allocation.
    let start = addr.next_multiple_of(4096);
    let end = (addr + len) & !4095;
    if end > start {
        // SAFETY: pages of a window this library mapped, inside a freed
        // allocation: nothing else lives there.
        unsafe { libc::madvise(start as *mut c_void, (end - start) as usize, libc::MADV_DONTNEED) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_stay_below_the_stacks_and_apart() {
        let w = windows(simcard::MAX_DEVICES as u64);
        assert!(w.iter().all(|&(b, l)| b + l <= 0x7400_0000_0000));
        for (i, a) in w.iter().enumerate() {
            for b in &w[i + 1..] {
                assert!(a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0, "{a:x?} overlaps {b:x?}");
            }
        }
        assert!(inside(2, DEVICE_BASE + DEVICE_WINDOW - 8, 8));
        assert!(!inside(2, DEVICE_BASE + DEVICE_WINDOW - 8, 9));
        assert!(!inside(2, DEVICE_BASE + 2 * DEVICE_WINDOW, 1));
    }
}
