//! The card under its file lock: what is rare enough to take it (a
//! process's first charge claims a slot, exited processes' memory is given
//! back, the card is made anew, tests and NVML read who holds what).
use crate::{
    layout::{Board, Slot, MAGIC},
    Card, Config, FlockGuard, Process, MAX_DEVICES,
};

/// The card, locked for a look or a rare change (unlocked when dropped).
pub struct Locked<'a> {
    card: &'a Card,
    _lock: FlockGuard<'a>,
}

impl<'a> Locked<'a> {
    pub(crate) fn new(card: &'a Card, lock: FlockGuard<'a>) -> Self {
        Self { card, _lock: lock }
    }

    fn board(&self) -> &Board {
        // SAFETY: the mapping lives as long as the card; under the lock no
        // other process changes anything but the atomic counters.
        unsafe { &*self.card.board }
    }

    fn board_mut(&mut self) -> &mut Board {
        // SAFETY: as in `board`; `&mut self` makes this the only reference
        // in this process, and callers serialise their threads.
        unsafe { &mut *self.card.board }
    }

    /// Makes the card anew where it is not one, or where `config` differs
    /// and no running process holds anything on it.
    pub(crate) fn settle(&mut self, config: Option<Config>) {
        if self.board().magic != MAGIC {
            self.board_mut().reset(config.unwrap_or_else(Config::from_env));
            return;
        }
        if let Some(c) = config.filter(|c| *c != self.board().config) {
            self.sweep();
            if self.board().slots.iter().all(|s| s.pid == 0) {
                self.board_mut().reset(c);
            }
        }
    }

    /// The slot of process `p`, claiming a free one for a process new to
    /// the card; None when all are taken by running processes.
    pub fn claim(&mut self, p: Process) -> Option<usize> {
        if let Some(i) = self.board().slots.iter().position(|s| s.pid == p.pid && s.start == p.start) {
            return Some(i);
        }
        if !self.board().slots.iter().any(|s| s.pid == 0) {
            self.sweep();
        }
        let i = self.board().slots.iter().position(|s| s.pid == 0)?;
        self.board_mut().slots[i] = Slot { pid: p.pid, start: p.start, ..Slot::FREE };
        Some(i)
    }

    /// What process `pid` holds on `dev`: (memory, contexts).
    pub fn held(&self, pid: u32, dev: usize) -> (u64, u64) {
        self.board()
            .slots
            .iter()
            .find(|s| s.pid == pid && dev < MAX_DEVICES)
            .map_or((0, 0), |s| (s.memory[dev], s.contexts[dev]))
    }

    /// The running processes holding anything on `dev`, with everything
    /// each holds there (as NVML lists them).
    pub fn processes(&mut self, dev: usize) -> Vec<(u32, u64)> {
        self.sweep();
        let slots = &self.board().slots;
        slots
            .iter()
            .filter(|s| s.pid != 0 && dev < MAX_DEVICES && s.total(dev) > 0)
            .map(|s| (s.pid, s.total(dev)))
            .collect()
    }

    /// Gives back everything processes that no longer run held.
    pub fn sweep(&mut self) {
        let Board { used, slots, .. } = self.board_mut();
        for s in slots.iter_mut().filter(|s| s.pid != 0) {
            if (Process { pid: s.pid, start: s.start }).alive() {
                continue;
            }
            for (d, u) in used.iter_mut().enumerate() {
                // Atomic: running processes change the device's total
                // without the lock.
                let total = s.total(d);
                // SAFETY: `u` is a u64 of the board; atomic like every
                // other change of it.
                unsafe { std::sync::atomic::AtomicU64::from_ptr(u) }
                    .fetch_sub(total, std::sync::atomic::Ordering::AcqRel);
            }
            *s = Slot::FREE;
        }
    }
}
