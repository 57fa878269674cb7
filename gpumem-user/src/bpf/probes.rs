//! The probe table: every driver symbol gpumem attaches to, with the eBPF
//! programs that serve it. It is `gpumem_common::api::APIS` (symbol, API
//! id, family, shape, kind, required or optional) with each shape's entry
//! and return programs; adding a symbol of a known shape is one row there.
use gpumem_common::{
    api::{Api, APIS},
    program::Program,
};

pub use gpumem_common::api::{Library, Need, Shape};

/// One row: an API and its programs.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub api: &'static Api,
    /// Program attached at the function entry.
    pub entry: &'static str,
    /// Program attached at the return, if the row has one.
    pub ret: Option<&'static str>,
}

impl Probe {
    pub const fn symbol(&self) -> &'static str {
        self.api.symbol
    }

    /// The programs attached for this row, each with whether it is the
    /// return probe: its own, or `instead`'s (entry, return) at the same
    /// sites (the return only where the row has one: the bench's floor).
    pub fn roles(
        &self,
        instead: Option<(&'static str, &'static str)>,
    ) -> impl Iterator<Item = (&'static str, bool)> {
        let (entry, ret) = match instead {
            Some((entry, ret)) => (entry, self.ret.map(|_| ret)),
            None => (self.entry, self.ret),
        };
        [Some((entry, false)), ret.map(|r| (r, true))].into_iter().flatten()
    }
}

/// Every probe, in attach order.
pub fn probes() -> impl Iterator<Item = Probe> {
    APIS.iter().map(|api| {
        let (entry, ret) = api.shape.programs();
        Probe { api, entry: entry.name(), ret: ret.map(Program::name) }
    })
}

/// Raw tracepoints (program, tracepoint): exit and exec, which uncharge
/// processes whose driver state is gone (exec also reads the limits the
/// new image declares), and fork, which gives a child its parent's.
pub const TRACEPOINTS: &[(&str, &str)] = &[
    ("process_exit", "sched_process_exit"),
    ("process_exec", "sched_process_exec"),
    ("process_fork", "sched_process_fork"),
];

/// Never attached: run by the agent for a process whose exit the kernel
/// skipped (see gpumem-ebpf's families/exit.rs).
pub const RELEASE_GONE: &str = "release_gone";

/// Never attached: run by the agent for an exited image's entries in the
/// hash maps (see gpumem-ebpf's families/exit.rs).
pub const FORGET_DEAD: &str = "forget_dead";

/// Never attached: run by the agent to store which build's programs run
/// (see gpumem-ebpf's base/handover.rs).
pub const HANDOVER_SET: &str = "handover_set";

/// Loaded apart from the others, where the kernel allows it: it writes
/// user memory, which lockdown forbids; its rows are attached only where
/// it loaded (see `Tracer::view_refusal`).
pub const VIEW_RETURN: &str = Program::ViewReturn.name();

/// The empty programs `gpumem floor` attaches at the same sites (bench).
pub const FLOOR: (&str, &str) = ("floor_entry", "floor_return");

/// Names of every program the agent loads, each once.
pub fn programs() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Program::ALL
        .iter()
        .map(|p| p.name())
        .chain([FLOOR.0, FLOOR.1, RELEASE_GONE, FORGET_DEAD, HANDOVER_SET])
        .chain(TRACEPOINTS.iter().map(|&(name, _)| name))
        .filter(|&name| name != VIEW_RETURN)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_program_is_loaded_and_every_guarded_program_serves_a_row() {
        let loaded = programs();
        for p in probes() {
            let ret_loaded = p.ret.is_none_or(|r| loaded.contains(&r) || r == VIEW_RETURN);
            assert!(loaded.contains(&p.entry) && ret_loaded, "{}", p.symbol());
        }
        assert!(!loaded.contains(&VIEW_RETURN), "loaded on its own, where the kernel allows it");
        for prog in Program::ALL {
            assert!(
                probes().any(|p| p.entry == prog.name() || p.ret == Some(prog.name())),
                "{} serves no row of the table",
                prog.name()
            );
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
