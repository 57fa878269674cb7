//! Loading the object's programs on every core at once.
//!
//! Start-up time is almost all the kernel's verifier (about 440 ms for the
//! 33 programs on a 2-core machine, one program alone 150 ms; measured with
//! `strace -T -e bpf`). Privileged loads verify in parallel, so each core
//! takes the next program from a shared queue, the costliest first.
use std::{collections::HashMap, sync::Mutex};

use aya::{
    programs::{Program, ProgramError},
    Ebpf,
};

use super::error::BpfError;

/// Programs whose verification costs far more than the rest (the array
/// descriptor arithmetic and the shared allocation return): started first
/// so that no core is left with one of them at the end.
const COSTLY_FIRST: &[&str] =
    &["mipmap_entry", "alloc_return", "array3d_entry", "array_entry", "process_exit"];

/// Loads every program in `names` (uprobes and raw tracepoints); on error,
/// the first failure by name order.
pub fn load_programs(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<(), BpfError> {
    let wanted: HashMap<&str, &'static str> = names.iter().map(|&n| (n, n)).collect();
    let mut queue: Vec<(&'static str, &mut Program)> =
        ebpf.programs_mut().filter_map(|(n, p)| wanted.get(n).map(|&name| (name, p))).collect();
    if let Some(&missing) = names.iter().find(|n| !queue.iter().any(|(q, _)| q == *n)) {
        return Err(BpfError::MissingProgram(missing));
    }
    // Popped from the back: the costly ones go last in the vector.
    let rank = |n: &str| COSTLY_FIRST.iter().position(|c| *c == n).map_or(0, |i| COSTLY_FIRST.len() - i);
    queue.sort_by_key(|(n, _)| rank(n));
    let queue = Mutex::new(queue);
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(names.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some((name, prog)) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else {
                    break;
                };
                if let Err(e) = load_one(prog) {
                    failures.lock().unwrap_or_else(|e| e.into_inner()).push((name, e));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    failures.sort_by_key(|(n, _)| *n);
    match failures.into_iter().next() {
        Some((name, e)) => Err(BpfError::Program { name, source: Box::new(e) }),
        None => Ok(()),
    }
}

fn load_one(prog: &mut Program) -> Result<(), ProgramError> {
    match prog {
        Program::UProbe(p) => p.load(),
        Program::RawTracePoint(p) => p.load(),
        // gpumem's object has uprobes and raw tracepoints only.
        _ => Err(ProgramError::UnexpectedProgramType),
    }
}
