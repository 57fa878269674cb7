//! What is held at one moment, as a rule set at run time carries it
//! (`setting.rs`): the kernel's live allocations, which of them the
//! kernel charges under which slot, and which the agent has not read the
//! record of yet.
use std::collections::HashSet;

use gpumem_common::{LiveAlloc, LiveKey};

use super::carried;
use crate::ledger::{Ledger, LiveAllocation};

/// What is held at one moment.
pub struct Held<'a> {
    pub live: Vec<LiveAllocation<'a>>,
    /// Which of them the kernel charges under which slot (see
    /// `carried::charged`).
    pub charged: HashSet<(u32, u32, (u32, u64))>,
    /// Those whose `alloc` record the agent has not read yet.
    pub unseen: HashSet<(u32, (u32, u64))>,
}

impl<'a> Held<'a> {
    /// The kernel's live allocations (`KernelMaps::held`), named as the
    /// ledger names their processes.
    pub fn of_kernel(held: &[(LiveKey, LiveAlloc)], ledger: &'a Ledger, now_ns: u64) -> Self {
        let seen: HashSet<(u32, (u32, u64))> =
            ledger.live_allocations().iter().map(|a| (a.tgid, a.key)).collect();
        let live: Vec<LiveAllocation<'a>> = held
            .iter()
            .map(|(k, a)| {
                let comm = ledger.process(k.tgid).map_or("", |p| p.comm.as_str());
                LiveAllocation::of_kernel(k, a, comm, now_ns)
            })
            .collect();
        let unseen = live.iter().map(|a| (a.tgid, a.key)).filter(|k| !seen.contains(k)).collect();
        Self { live, charged: carried::charged(held), unseen }
    }

    /// Allocations known otherwise (an adopting agent's ledger, built from
    /// the kernel's), none charged under a new rule.
    pub fn of(live: Vec<LiveAllocation<'a>>) -> Self {
        Self { live, charged: HashSet::new(), unseen: HashSet::new() }
    }
}
