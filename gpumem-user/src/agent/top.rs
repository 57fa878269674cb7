//! The answer to `top`: everything `gpumem top` draws, in one answer.
use super::Agent;
use crate::output::{monotonic_ns, Allocation, ProcessAllocations, TopReport};

/// How many of each process's oldest live allocations `top` gets.
pub const OLDEST: usize = 8;

impl Agent {
    /// The usage table, the limits, the latest decisions and failures, and
    /// each process's oldest live allocations, aged now.
    pub fn top(&mut self) -> TopReport {
        let status = self.status();
        let now_ns = monotonic_ns();
        let oldest = self
            .ledger
            .processes()
            .into_iter()
            .map(|(pid, p)| ProcessAllocations {
                pid,
                live: p.live_count() as u64,
                oldest: self.ledger.oldest(pid, OLDEST).iter().map(|a| Allocation::of(a, now_ns)).collect(),
            })
            .collect();
        TopReport { now_ns, status, limits: self.limits.list(), recent: self.recent.list(), oldest }
    }
}
