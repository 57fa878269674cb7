//! The agent's own memory: what it gives back to the system. glibc keeps
//! freed memory for reuse, so without these the agent would stay at its
//! high-water mark: the kernel's BTF and the eBPF object parsed at start
//! (about 10 MB, freed once the programs are loaded) and the live-allocation
//! tables of processes that have exited.

/// Large blocks (over 128 KiB: the ledger's tables of a process holding
/// thousands of allocations, the kernel's BTF) are mapped on their own and
/// unmapped when freed. glibc would otherwise raise this threshold after
/// the first such block is freed and serve the next ones from its heap,
/// which it hands back only from the top.
#[cfg(target_env = "gnu")]
pub fn map_large_blocks() {
    // SAFETY: mallopt changes allocator settings only, under glibc's own
    // lock; 128 KiB is within the option's range (up to 32 MiB).
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    if set == 0 {
        tracing::debug!("mallopt(M_MMAP_THRESHOLD) refused: freed large blocks stay in the heap");
    }
}

/// Hands the free pages inside glibc's heap back to the system (what the
/// start-up's parsing freed, or an exited process's tables).
#[cfg(target_env = "gnu")]
pub fn give_back_freed() {
    // SAFETY: malloc_trim only walks the allocator's free lists under its
    // own locks; it takes no pointers of ours.
    unsafe { libc::malloc_trim(0) };
}

/// Other C libraries (musl) have neither call; their allocators give
/// freed memory back by themselves.
#[cfg(not(target_env = "gnu"))]
pub fn map_large_blocks() {}

#[cfg(not(target_env = "gnu"))]
pub fn give_back_freed() {}
