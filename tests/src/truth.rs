//! The ground truth a workload prints at each checkpoint: one JSON object
//! per line on stdout, which tests compare with the agent's numbers.
use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
};

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
    /// Bytes held by `kind:device` (as gpumem names kinds; device `-` when
    /// unknown). Empty when the workload only allocates device memory on
    /// one device and does not track the split.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub split: BTreeMap<String, u64>,
}

/// Counters shared by a workload's threads.
#[derive(Debug, Default)]
pub struct Truth {
    held: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    failed: AtomicU64,
    split: Mutex<BTreeMap<String, u64>>,
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
    /// A successful allocation of `kind` on `device`.
    pub fn allocated_as(&self, kind: &str, device: i32, bytes: u64) {
        self.allocated(bytes);
        *self.split.lock().unwrap().entry(format!("{kind}:{device}")).or_default() += bytes;
    }

    /// A successful free (or release) of what [`Self::allocated_as`] counted.
    pub fn freed_as(&self, kind: &str, device: i32, bytes: u64) {
        self.freed(bytes);
        let mut split = self.split.lock().unwrap();
        let key = format!("{kind}:{device}");
        let v = split.entry(key.clone()).or_default();
        *v -= bytes;
        if *v == 0 {
            split.remove(&key);
        }
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
            split: self.split.lock().unwrap().clone(),
        }
    }
}
