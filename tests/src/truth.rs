//! The ground truth a workload prints at each checkpoint: one JSON object
//! per line on stdout, which tests compare with the agent's numbers.
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    pub checkpoint: String,
    pub pid: u32,
    /// Bytes this process holds (successful allocations not yet freed).
    pub held: u64,
    /// Successful allocations so far.
    pub allocs: u64,
    /// Successful frees so far.
    pub frees: u64,
    /// Allocations the driver refused so far.
    pub failed: u64,
}

/// Counters shared by a workload's threads.
#[derive(Debug, Default)]
pub struct Truth {
    held: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    failed: AtomicU64,
}

impl Truth {
    pub fn allocated(&self, bytes: u64) {
        self.held.fetch_add(bytes, Ordering::SeqCst);
        self.allocs.fetch_add(1, Ordering::SeqCst);
    }
    pub fn freed(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::SeqCst);
        self.frees.fetch_add(1, Ordering::SeqCst);
    }
    pub fn refused(&self) {
        self.failed.fetch_add(1, Ordering::SeqCst);
    }
    pub fn checkpoint(&self, name: &str) -> Checkpoint {
        Checkpoint {
            checkpoint: name.to_string(),
            pid: std::process::id(),
            held: self.held.load(Ordering::SeqCst),
            allocs: self.allocs.load(Ordering::SeqCst),
            frees: self.frees.load(Ordering::SeqCst),
            failed: self.failed.load(Ordering::SeqCst),
        }
    }
}
