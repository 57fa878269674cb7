//! Loading the object's programs on every core at once (and the work
//! queue on threads that multi links' loads and closes share).
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

/// Programs whose verification costs far more than the rest (the shared
/// allocation entry and return): started first so that no core is left
/// with one of them at the end.
const COSTLY_FIRST: &[&str] = &["alloc_entry", "alloc_return", "process_exit", "release_gone"];

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
    let workers = cores().min(names.len());
    let mut failures: Vec<_> =
        on_threads(queue, workers, |(name, prog)| load_one(prog).err().map(|e| (name, e)))
            .into_iter()
            .flatten()
            .collect();
    failures.sort_by_key(|(n, _)| *n);
    match failures.into_iter().next() {
        Some((name, e)) => Err(BpfError::Program { name, source: Box::new(e) }),
        None => Ok(()),
    }
}

/// The cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `f` on each item of `queue` from `threads` threads at once (at
/// least one; none for an empty queue), each taking the next item from
/// the back of the queue; the results in the order they finished.
pub fn on_threads<T: Send, R: Send>(queue: Vec<T>, threads: usize, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    if queue.is_empty() {
        return Vec::new();
    }
    let queue = Mutex::new(queue);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let Some(item) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else { break };
                let r = f(item);
                results.lock().unwrap_or_else(|e| e.into_inner()).push(r);
            });
        }
    });
    results.into_inner().unwrap_or_else(|e| e.into_inner())
}

fn load_one(prog: &mut Program) -> Result<(), ProgramError> {
    match prog {
        Program::UProbe(p) => p.load(),
        Program::RawTracePoint(p) => p.load(),
        // gpumem's object has uprobes and raw tracepoints only.
        _ => Err(ProgramError::UnexpectedProgramType),
    }
}

#[cfg(test)]
mod tests {
    use super::on_threads;

    #[test]
    fn every_item_runs_once_whatever_the_threads() {
        for threads in [0, 1, 3, 64] {
            let mut out = on_threads((0..100).collect(), threads, |i: u32| i * 2);
            out.sort_unstable();
            assert_eq!(out, (0..100).map(|i| i * 2).collect::<Vec<_>>(), "{threads} threads");
        }
        assert!(on_threads(Vec::<u32>::new(), 4, |i| i).is_empty());
    }
}
