//! `cargo xtask bench [--quick]`: what tracing costs, as ratios measured
//! side by side in one run (these machines are noisy; absolute times
//! drift). Each repetition runs every configuration in turn (interleaved),
//! each configuration runs a tight cuMemAlloc_v2+cuMemFree_v2 loop, a
//! loop mixing the families and the stream-ordered pool loops
//! (`setup::LOOPS`), and the report takes the median per cell.
//! After each configuration's loops, one more alloc+free loop and one more
//! `cuMemAllocAsync`+`cuMemFreeAsync` loop run with the kernel's
//! per-program statistics on, to say where the time goes (`runtime`).
//! The loops run on the simulated driver's release build, whose entry
//! points are NVIDIA-shaped stubs. Then the same
//! configurations on NVIDIA's own 550 library beside a reference library
//! whose entry points the kernel emulates (`nvidia`), one agent under load
//! (`load`), attaching and detaching 1 and 20 libraries (`attach`), and what
//! the verifier walked for its programs (`verifier`). Writes
//! target/bench/report.md and target/bench/report.json (`report`).
//! `--load-against` measures only the agent under load, this build's
//! beside another's (`load_against`).
mod attach;
mod load;
mod load_against;
mod nvidia;
mod pod;
mod programs_against;
mod start_against;
pub use programs_against::Against;
mod report;
mod runtime;
mod setup;
mod tracer;
mod verifier;

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::{bail, Context};

use self::{
    setup::{bpftrace, bpftrace_script, build, median, run_loop, Built, CONFIGS, LOOPS, POOL_LOOP_ARGS},
    tracer::{tracer_command, Tracer},
};
use crate::util::is_root;

/// What the repetitions collect.
#[derive(Default)]
struct Collected {
    samples: BTreeMap<(&'static str, &'static str), Vec<f64>>,
    attach_ms: Vec<f64>,
    verified: Option<verifier::Verified>,
    runtimes: BTreeMap<&'static str, Vec<runtime::Runtime>>,
    pool_runtimes: BTreeMap<&'static str, Vec<runtime::Runtime>>,
    runtime_missing: Option<String>,
}

impl Collected {
    /// One configuration's loops (and, with a tracer, its programs' run
    /// time; for the agent, its start-up and verifier counts).
    fn measure(
        &mut self,
        config: &'static str,
        tracer: Option<(Tracer, Duration)>,
        b: &Built,
        sizes: (usize, usize),
    ) -> anyhow::Result<()> {
        let (pairs, mixed_pairs) = sizes;
        if let (Some((t, started)), "gpumem") = (&tracer, config) {
            self.attach_ms.push(started.as_secs_f64() * 1000.0);
            if self.verified.is_none() {
                let pid = t.pid().context("the agent has no pid")?;
                self.verified = Some(verifier::verified(pid).unwrap_or_else(|e| {
                    eprintln!("xtask: bench: no verifier counts: {e:#}");
                    verifier::Verified::new()
                }));
            }
        }
        for (name, args) in LOOPS {
            if config == "bpftrace" && name != "alloc_free" {
                continue; // the script covers cuMemAlloc_v2/cuMemFree_v2 only
            }
            let n = if name == "mixed" { mixed_pairs } else { pairs };
            self.samples.entry((config, name)).or_default().push(run_loop(b, args, n)?);
        }
        if let (Some(pid), None) = (tracer.as_ref().and_then(|t| t.0.pid()), &self.runtime_missing) {
            match runtime::measure(pid, || run_loop(b, &[], pairs).map(drop)) {
                Ok(r) => self.runtimes.entry(config).or_default().push(r),
                Err(e) => self.runtime_missing = Some(format!("{e:#}")),
            }
            // The pool loop's programs too, where the tracer traces it
            // (bpftrace's script does not).
            if config != "bpftrace" && self.runtime_missing.is_none() {
                match runtime::measure(pid, || run_loop(b, POOL_LOOP_ARGS, pairs).map(drop)) {
                    Ok(r) => self.pool_runtimes.entry(config).or_default().push(r),
                    // The plain loop's table stands: this one lacks the row.
                    Err(e) => eprintln!("xtask: bench: no run time of the pool loop under {config}: {e:#}"),
                }
            }
        }
        Ok(())
    }
}

/// What `cargo xtask bench` was asked for beyond `--quick`.
#[derive(Default)]
pub struct Only<'a> {
    pub attach: bool,
    pub load_against: Option<&'a Path>,
    pub programs_against: Option<Against<'a>>,
    pub start_against: Option<&'a Path>,
    /// --start-against on NVIDIA's 550 libcuda.
    pub on_nvidia: bool,
}

pub fn bench(quick: bool, only: Only<'_>) -> anyhow::Result<()> {
    let Only { attach: attach_only, load_against, programs_against, start_against, on_nvidia } = only;
    if !is_root() {
        bail!("cargo xtask bench loads eBPF programs: run it as root");
    }
    let b = build()?;
    let (reps, pairs, mixed_pairs) = if quick { (3, 20_000, 4_000) } else { (7, 100_000, 20_000) };
    if let Some(other) = load_against {
        return load_against::compare(&b, other, reps, quick);
    }
    if let Some(against) = programs_against {
        return programs_against::compare(&b, &against, reps + 1, pairs * 10);
    }
    if let Some(other) = start_against {
        return start_against::compare(&b, other, if quick { 12 } else { 24 }, on_nvidia);
    }
    if attach_only {
        let attach = attach::measure(&b, reps)?;
        std::fs::write(b.out.join("attach.json"), serde_json::to_string_pretty(&attach.json())?)?;
        println!("{}", attach.markdown());
        return Ok(());
    }
    let bpftrace = bpftrace();
    let script = b.out.join("gpumem.bt");
    std::fs::write(&script, bpftrace_script(&b.libcuda))?;
    let mut c = Collected::default();
    for rep in 0..reps {
        eprintln!("xtask: bench repetition {}/{reps}", rep + 1);
        for config in CONFIGS {
            let Ok(command) = tracer_command(config, &b, &b.libcuda, &script, &bpftrace) else { continue };
            let tracer = command.map(|(cmd, ready)| Tracer::start(cmd, ready)).transpose()?;
            c.measure(config, tracer, &b, (pairs, mixed_pairs))?;
        }
    }
    let nvidia = nvidia::measure(&b, reps, pairs, &bpftrace)?;
    let _ = std::fs::remove_file(b.out.join("events.jsonl"));
    eprintln!("xtask: bench: the agent under load");
    let load = load::measure(&b, quick)?;
    let attach = attach::measure(&b, reps)?;
    let run = report::Run {
        reps,
        pairs,
        mixed_pairs,
        attach_ms: median(c.attach_ms),
        verified: c.verified.unwrap_or_default(),
        runtimes: c.runtimes,
        pool_runtimes: c.pool_runtimes,
        runtime_missing: c.runtime_missing,
        bpftrace_missing: bpftrace.err(),
    };
    report::write(&b.out, &c.samples, &run, &load, &nvidia, &attach)
}
