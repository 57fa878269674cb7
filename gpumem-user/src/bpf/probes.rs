//! The probe table: every driver symbol gpumem attaches to, the eBPF
//! programs that serve it, the API id and memory kind passed in the attach
//! cookie, and whether the agent refuses to run without it. This table is
//! the documentation of coverage; adding a symbol of a known shape is one
//! row.
use gpumem_common::{id, kind};

/// Whether a libcuda without this symbol can still be traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every libcuda gpumem supports exports it; missing means this is not
    /// a CUDA driver (or a far too old one): refuse.
    Required,
    /// Skipped, and listed once at start-up, when absent.
    Optional,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub symbol: &'static str,
    /// Program attached at the function entry.
    pub entry: &'static str,
    /// Program attached at the return.
    pub ret: &'static str,
    pub api: u32,
    pub kind: u32,
    pub need: Need,
}

const fn row(symbol: &'static str, family: Family, api: u32, kind: u32, need: Need) -> Probe {
    let (entry, ret) = family.programs();
    Probe { symbol, entry, ret, api, kind, need }
}

/// Argument shapes, each served by one entry/return program pair.
#[derive(Clone, Copy, Debug)]
pub enum Family {
    /// `(T **out, size_t bytes, ...)`: charged at a successful return.
    Alloc,
    /// `(T addr, ...)`: uncharged at a successful return.
    Free,
}

impl Family {
    const fn programs(self) -> (&'static str, &'static str) {
        match self {
            Family::Alloc => ("alloc_entry", "alloc_return"),
            Family::Free => ("free_entry", "free_return"),
        }
    }
}

use Family::*;
use Need::*;

/// Every probe, in attach order.
pub const PROBES: &[Probe] = &[
    row("cuMemAlloc_v2", Alloc, id::MEM_ALLOC_V2, kind::DEVICE, Required),
    row("cuMemFree_v2", Free, id::MEM_FREE_V2, kind::DEVICE, Required),
];

/// The raw tracepoint that uncharges exiting processes.
pub const EXIT_PROGRAM: &str = "process_exit";
pub const EXIT_TRACEPOINT: &str = "sched_process_exit";

/// Names of every program in the object, each loaded once.
pub fn programs() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = PROBES.iter().flat_map(|p| [p.entry, p.ret]).collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_is_listed_once_and_named_for_its_api() {
        let mut seen = std::collections::HashSet::new();
        for p in PROBES {
            assert!(seen.insert(p.symbol), "{} listed twice", p.symbol);
            assert_eq!(id::name(p.api), p.symbol, "api id of {} names another symbol", p.symbol);
        }
    }

    #[test]
    fn program_list_has_no_duplicates() {
        let names = programs();
        assert!(names.contains(&"alloc_entry") && names.contains(&"free_return"));
        let mut sorted = names.clone();
        sorted.dedup();
        assert_eq!(sorted, names);
    }
}
