//! Loading the object's programs on every core at once (and the work
//! queue on threads that multi links' loads and closes share).
//!
//! Start-up time is mostly the kernel's verifier, and most of that is one
//! program, `alloc_return` (about 90 ms of the 130 ms the uprobe programs
//! take on a 2-core machine, measured by timing each load). Privileged
//! loads verify in parallel, so each core takes the next program from one
//! shared queue, the costliest first: the object's programs that aya loads
//! (raw tracepoints; every program with single links) and those relocated
//! for multi links verify side by side, while one core walks
//! `alloc_return`.
use std::{collections::HashMap, sync::Mutex};

use aya::{
    programs::{Program, ProgramError},
    Ebpf,
};
use aya_obj::generated::bpf_insn;

use super::error::BpfError;

/// Programs whose verification costs far more than the rest, costliest
/// first (the shared allocation return and entry, the exec's and the
/// exit's releases; `GPUMEM_LOG=debug` says what each took): started
/// first so that no core is left with one of them at the end. The exec's
/// (30 to 60 ms on a 2-core host) was once missing here: ranked with the
/// smallest, it started last, and one core verified it alone while the
/// other had nothing left to do.
const COSTLY_FIRST: &[&str] =
    &["alloc_return", "alloc_entry", "process_exec", "release_gone", "process_exit", "forget_dead"];

/// One program to verify.
pub enum Job<'a> {
    /// One of the object's, loaded by aya.
    Object(&'static str, &'a mut Program),
    /// Instructions relocated by the caller, loaded by its own `load`.
    Insns(&'static str, Vec<bpf_insn>),
}

impl Job<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::Object(n, _) | Self::Insns(n, _) => n,
        }
    }

    /// Verification cost, roughly: the named costly ones first, then the
    /// longest.
    fn cost(&self) -> (usize, usize) {
        let n = self.name();
        let rank = COSTLY_FIRST.iter().position(|c| *c == n).map_or(0, |i| COSTLY_FIRST.len() - i);
        let len = match self {
            Self::Object(..) => 0,
            Self::Insns(_, insns) => insns.len(),
        };
        (rank, len)
    }
}

/// The object's programs `names` (uprobes and raw tracepoints) as jobs.
pub fn object_jobs<'a>(ebpf: &'a mut Ebpf, names: &[&'static str]) -> Result<Vec<Job<'a>>, BpfError> {
    let wanted: HashMap<&str, &'static str> = names.iter().map(|&n| (n, n)).collect();
    let jobs: Vec<Job<'a>> =
        ebpf.programs_mut().filter_map(|(n, p)| wanted.get(n).map(|&name| Job::Object(name, p))).collect();
    if let Some(&missing) = names.iter().find(|n| !jobs.iter().any(|j| j.name() == **n)) {
        return Err(BpfError::MissingProgram(missing));
    }
    Ok(jobs)
}

/// Loads every program in `names` (uprobes and raw tracepoints); on error,
/// the first failure by name order.
pub fn load_programs(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<(), BpfError> {
    verify(object_jobs(ebpf, names)?, |_, _| ()).map(drop)
}

/// Verifies `jobs` on every core at once, the costliest first, loading
/// each `Insns` job with `load`. An object program's failure is an error
/// (the first by name); each `Insns` job's result is given back by name.
pub fn verify<R: Send>(
    mut jobs: Vec<Job<'_>>,
    load: impl Fn(&'static str, &[bpf_insn]) -> R + Sync,
) -> Result<Vec<(&'static str, R)>, BpfError> {
    // Popped from the back: the costly ones go last in the vector.
    jobs.sort_by_key(Job::cost);
    let workers = cores().min(jobs.len());
    let done = on_threads(jobs, workers, |job| {
        let started = std::time::Instant::now();
        let done = match job {
            Job::Object(name, prog) => (name, load_one(prog).map(|()| None)),
            Job::Insns(name, insns) => (name, Ok(Some(load(name, &insns)))),
        };
        // GPUMEM_LOG=debug: where start-up's time goes, program by program.
        tracing::debug!("loaded {} in {:.1} ms", done.0, started.elapsed().as_secs_f64() * 1e3);
        done
    });
    let mut loaded = Vec::new();
    let mut failures = Vec::new();
    for (name, outcome) in done {
        match outcome {
            Ok(Some(r)) => loaded.push((name, r)),
            Ok(None) => {}
            Err(e) => failures.push((name, e)),
        }
    }
    failures.sort_by_key(|(n, _)| *n);
    match failures.into_iter().next() {
        Some((name, e)) => Err(BpfError::Program { name, source: Box::new(e) }),
        None => Ok(loaded),
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
