//! The `holders` of out-of-memory and limit records: the top holders on a
//! device or under a limit, from the ledger at the moment of the record
//! (records are applied in order, so the ledger holds what was held when
//! the call was made), named by the enricher, with NVML's view of the
//! device where it loads. An answer is kept until the ledger next changes:
//! a process retrying a refused call in a loop costs one computation. For
//! a limit, whose decisions can come at every call (an `audit` limit a
//! process runs past), an answer is also kept for a second while the
//! decisions go on: each one costs a walk of the limit's cgroups and of
//! every live allocation, which at that rate would slow the agent down
//! and lose records.
use std::time::{Duration, Instant};

use gpumem_common::{kind, CUDA_ERROR_OUT_OF_MEMORY};

use crate::{
    decode::Change,
    enrich::{devices::Devices, Enricher},
    ledger::{holders::Top, Ledger},
    limits::Limits,
    output::{Holder, Holders, SplitLine},
};

/// How many processes and how many cgroups a `holders` lists.
const TOP: usize = 5;

/// What a `holders` is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum About {
    /// A device (None: every device, where the call's was not known).
    Device(Option<u32>),
    /// The limit in a slot.
    Limit(u32),
}

/// How long a limit's holders are kept while its decisions go on.
const LIMIT_KEPT: Duration = Duration::from_secs(1);

/// The last answer, the ledger's change count it is valid for, and when it
/// was made.
struct Kept {
    changes: u64,
    about: About,
    holders: Box<Holders>,
    at: Instant,
}

impl Kept {
    /// Whether this answer still stands for `about`, the ledger at
    /// `changes`.
    fn stands(&self, about: About, changes: u64) -> bool {
        self.about == about
            && (self.changes == changes || matches!(about, About::Limit(_)) && self.at.elapsed() < LIMIT_KEPT)
    }
}

/// What the agent's stages a `holders` is made from.
pub struct Sources<'a> {
    pub ledger: &'a Ledger,
    pub limits: &'a Limits,
    pub enricher: &'a mut Enricher,
    pub devices: &'a Devices,
}

/// Finds holders, keeping the last answer.
#[derive(Default)]
pub struct HolderLookup {
    kept: Option<Kept>,
}

impl About {
    /// The `holders` an `alloc_failed` record gets: only where the driver
    /// was out of memory.
    pub fn of_refusal(c: &Change) -> Option<Self> {
        (c.result == Some(CUDA_ERROR_OUT_OF_MEMORY)).then_some(Self::Device(c.device))
    }
}

impl HolderLookup {
    /// The top holders on a device or under a limit, now (None for a limit
    /// slot never used).
    pub fn find(&mut self, about: About, s: Sources<'_>) -> Option<Box<Holders>> {
        let changes = s.ledger.changes();
        if let Some(k) = self.kept.as_ref().filter(|k| k.stands(about, changes)) {
            return Some(k.holders.clone());
        }
        let (top, device) = match about {
            // What can run a device out of memory: its own memory, not
            // managed or pinned host memory charged from its context.
            About::Device(d) => {
                (s.ledger.top_holders(TOP, |a| (d.is_none() || a.device == d) && kind::on_device(a.kind)), d)
            }
            About::Limit(slot) => {
                let (m, device) = s.limits.matcher_of(slot)?;
                (s.ledger.top_holders(TOP, |a| m.covers(a.tgid, a.comm, a.cgroup_id, a.device)), device)
            }
        };
        let holders = Box::new(named(top, device, s.enricher, s.devices));
        self.kept = Some(Kept { changes, about, holders: holders.clone(), at: Instant::now() });
        Some(holders)
    }
}

/// `top`, with cgroup paths and NVML's view of `device`.
fn named(top: Top, device: Option<u32>, enricher: &mut Enricher, devices: &Devices) -> Holders {
    let memory = device.and_then(|d| devices.memory(d));
    let processes = top
        .processes
        .into_iter()
        .map(|(pid, comm, cgroup_id, usage)| Holder {
            pid: Some(pid),
            comm: Some(comm),
            cgroup: enricher.cgroup(cgroup_id).0.as_deref().map(str::to_string),
            bytes: usage.bytes,
            split: SplitLine::of(&usage),
        })
        .collect();
    let cgroups = top
        .cgroups
        .into_iter()
        .map(|(id, usage)| Holder {
            cgroup: enricher.cgroup(id).0.as_deref().map(str::to_string),
            bytes: usage.bytes,
            split: SplitLine::of(&usage),
            ..Holder::default()
        })
        .collect();
    Holders {
        device,
        total: top.total,
        capacity: memory.map(|m| m.0),
        used: memory.map(|m| m.1),
        processes,
        cgroups,
    }
}
