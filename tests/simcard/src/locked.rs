//! The card under its lock: what is rare enough to take it (a process's
//! first charge claims a slot, exited processes' memory is given back, the
//! card is made anew, tests and NVML read who holds what).
use std::sync::{atomic::Ordering, MutexGuard};

use crate::{
    layout::{Board, MAGIC},
    Config, FlockGuard, Process, MAX_DEVICES,
};

/// The card, locked for a look or a rare change (unlocked when dropped).
pub struct Locked<'a> {
    board: &'a Board,
    _local: MutexGuard<'a, ()>,
    _lock: FlockGuard<'a>,
}

impl<'a> Locked<'a> {
    pub(crate) fn new(board: &'a Board, local: MutexGuard<'a, ()>, lock: FlockGuard<'a>) -> Self {
        Self { board, _local: local, _lock: lock }
    }

    /// Makes the card anew where it is not one, or where `config` differs
    /// and no running process holds anything on it.
    pub(crate) fn settle(&self, config: Option<Config>) {
        if self.board.magic.load(Ordering::Acquire) != MAGIC {
            self.board.reset(config.unwrap_or_else(Config::from_env));
            return;
        }
        if let Some(c) = config.filter(|c| *c != self.board.config()) {
            self.sweep();
            if self.board.slots.iter().all(|s| s.pid() == 0) {
                self.board.reset(c);
            }
        }
    }

    fn find(&self, p: Process) -> Option<usize> {
        self.board.slots.iter().position(|s| s.pid() == p.pid && s.start() == p.start)
    }

    /// The slot of process `p`, claiming a free one for a process new to
    /// the card; None when all are taken by running processes.
    pub fn claim(&self, p: Process) -> Option<usize> {
        if let Some(i) = self.find(p) {
            return Some(i);
        }
        if !self.board.slots.iter().any(|s| s.pid() == 0) {
            self.sweep();
        }
        let i = self.board.slots.iter().position(|s| s.pid() == 0)?;
        let s = &self.board.slots[i];
        s.start.store(p.start, Ordering::Relaxed);
        s.pid.store(p.pid, Ordering::Relaxed);
        Some(i)
    }

    /// Gives back what process `p` holds, keeping nothing of it: a new
    /// program image (exec keeps the pid and start time) holds nothing.
    pub fn forget(&self, p: Process) {
        if let Some(i) = self.find(p) {
            self.release(i);
        }
    }

    /// What process `pid` holds on `dev`: (memory, contexts).
    pub fn held(&self, pid: u32, dev: usize) -> (u64, u64) {
        let slot = self.board.slots.iter().find(|s| s.pid() == pid && dev < MAX_DEVICES);
        slot.map_or((0, 0), |s| {
            (s.memory[dev].load(Ordering::Acquire), s.contexts[dev].load(Ordering::Acquire))
        })
    }

    /// The running processes holding anything on `dev`, with everything
    /// each holds there (as NVML lists them).
    pub fn processes(&self, dev: usize) -> Vec<(u32, u64)> {
        self.sweep();
        let slots = self.board.slots.iter().filter(|s| s.pid() != 0 && dev < MAX_DEVICES);
        slots.map(|s| (s.pid(), s.total(dev))).filter(|&(_, bytes)| bytes > 0).collect()
    }

    /// Gives back everything processes that no longer run held.
    pub fn sweep(&self) {
        for (i, s) in self.board.slots.iter().enumerate() {
            if s.pid() != 0 && !(Process { pid: s.pid(), start: s.start() }).alive() {
                self.release(i);
            }
        }
    }

    /// Takes slot `i`'s counters off the devices' totals and frees it.
    fn release(&self, i: usize) {
        let s = &self.board.slots[i];
        for (d, u) in self.board.used.iter().enumerate() {
            // What the slot held, taken from it first: a process killed
            // here leaves a smaller slot, never a count given back twice.
            let held = s.memory[d].swap(0, Ordering::AcqRel) + s.contexts[d].swap(0, Ordering::AcqRel);
            let _ = u.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| Some(u.saturating_sub(held)));
        }
        s.clear();
    }
}
