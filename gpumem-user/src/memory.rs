//! The agent's own memory: what it gives back to the system. glibc keeps
//! freed memory for reuse, so without these the agent would stay at its
//! high-water mark: the kernel's BTF and the eBPF object parsed at start
//! (about 10 MB, freed once the programs are loaded).
//!
//! Tried and given up: `mallopt(M_MMAP_THRESHOLD, 128 KiB)`, which makes
//! glibc unmap every freed block over 128 KiB (an exited process's ledger
//! tables went back at once) but also map, fault in and unmap every such
//! block again each time, where glibc would reuse its heap. While it was
//! in, the 6.1 kernel matrix's takeover tests, under emulation, ran past
//! 20 minutes (the host's did not slow): the likeliest cause, not proven.

/// Hands the free pages inside glibc's heap back to the system (what the
/// start-up's parsing freed).
#[cfg(target_env = "gnu")]
pub fn give_back_freed() {
    // SAFETY: malloc_trim only walks the allocator's free lists under its
    // own locks; it takes no pointers of ours.
    unsafe { libc::malloc_trim(0) };
}

/// Other C libraries (musl) have no such call.
#[cfg(not(target_env = "gnu"))]
pub fn give_back_freed() {}
