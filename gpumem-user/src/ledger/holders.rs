//! Who holds the memory a device or a limit covers, at the moment of a
//! record: the top processes and cgroups among the live allocations a
//! filter selects, with bytes by kind and device. Pure logic.
use std::collections::HashMap;

use super::{Ledger, LiveAllocation, Usage};

/// The top holders among what a filter covers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Top {
    /// (tgid, comm, the process's cgroup, what it holds of what is covered),
    /// most first.
    pub processes: Vec<(u32, String, u64, Usage)>,
    /// (cgroup id, what is covered of what it holds), most first.
    pub cgroups: Vec<(u64, Usage)>,
    /// Everything covered, over every holder (listed or not).
    pub total: u64,
}

impl Ledger {
    /// The `n` processes and `n` cgroups holding the most of the live
    /// allocations `covers` selects (ties: the lower pid or cgroup id
    /// first).
    pub fn top_holders(&self, n: usize, covers: impl Fn(&LiveAllocation<'_>) -> bool) -> Top {
        let mut procs: HashMap<u32, Usage> = HashMap::new();
        let mut cgroups: HashMap<u64, Usage> = HashMap::new();
        let mut total = 0u64;
        for a in self.live_allocations().iter().filter(|a| covers(a)) {
            procs.entry(a.tgid).or_default().charge(a.kind, a.device, a.size);
            cgroups.entry(a.cgroup_id).or_default().charge(a.kind, a.device, a.size);
            total = total.wrapping_add(a.size);
        }
        let mut processes: Vec<_> = procs
            .into_iter()
            .map(|(tgid, u)| {
                let p = self.procs.get(&tgid);
                (tgid, p.map(|p| p.comm.clone()).unwrap_or_default(), p.map_or(0, |p| p.cgroup_id), u)
            })
            .collect();
        processes.sort_by(|a, b| b.3.bytes.cmp(&a.3.bytes).then(a.0.cmp(&b.0)));
        processes.truncate(n);
        let mut cgroups: Vec<_> = cgroups.into_iter().collect();
        cgroups.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        cgroups.truncate(n);
        Top { processes, cgroups, total }
    }
}
