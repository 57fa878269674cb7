//! `cargo xtask bench [--quick]`: what tracing costs, as ratios measured
//! side by side in one run (these machines are noisy; absolute times
//! drift). Each repetition runs every configuration in turn (interleaved),
//! each configuration runs a tight cuMemAlloc_v2+cuMemFree_v2 loop and a
//! loop mixing the families, and the report takes the median per cell.
//! After each configuration's loops, one more alloc+free loop runs with
//! the kernel's per-program statistics on, to say where the time goes
//! (`runtime`). Then one agent is measured under load (see `load`), and
//! what the verifier walked for its programs (`verifier`). Writes
//! target/bench/report.md and target/bench/report.json (`report`).
mod load;
mod report;
mod runtime;
mod verifier;

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};

use crate::util::{interrupt, is_root, output, target_dir};

const CONFIGS: [&str; 5] = ["untraced", "floor", "gpumem", "gpumem+limits", "bpftrace"];
const LOOPS: [&str; 2] = ["alloc_free", "mixed"];

struct Built {
    agent: PathBuf,
    workload: PathBuf,
    libcuda: PathBuf,
    out: PathBuf,
}

fn build() -> anyhow::Result<Built> {
    let b = crate::artifacts::build_profile("release")?;
    Ok(Built { agent: b.agent, workload: b.workload, libcuda: b.libcuda, out: target_dir().join("bench") })
}

/// bpftrace from Debian's packages, installed if missing; None (with the
/// reason) if it cannot be had.
fn bpftrace() -> Result<PathBuf, String> {
    crate::util::ensure_tool("bpftrace", "bpftrace").map_err(|e| format!("{e:#}"))
}

/// The bpftrace equivalent: live allocations and per-process totals in maps.
fn bpftrace_script(lib: &Path) -> String {
    let l = lib.display();
    format!(
        r#"BEGIN {{ printf("ready\n"); }}
uprobe:{l}:cuMemAlloc_v2 {{ @ptr[tid] = arg0; @req[tid] = arg1; }}
uretprobe:{l}:cuMemAlloc_v2 /@ptr[tid]/ {{
  if (retval == 0) {{ $a = *(uint64 *)@ptr[tid]; @live[pid, $a] = @req[tid]; @held[pid] += @req[tid]; }}
  delete(@ptr[tid]); delete(@req[tid]);
}}
uprobe:{l}:cuMemFree_v2 {{ @freeing[tid] = arg0; }}
uretprobe:{l}:cuMemFree_v2 /@freeing[tid]/ {{
  if (retval == 0) {{ @held[pid] -= @live[pid, @freeing[tid]]; delete(@live[pid, @freeing[tid]]); }}
  delete(@freeing[tid]);
}}
END {{ clear(@live); clear(@ptr); clear(@req); clear(@freeing); }}
"#
    )
}

/// A tracer running for one configuration; stopped on drop.
struct Tracer(Option<Child>);

impl Tracer {
    fn start(mut c: Command, ready: &str) -> anyhow::Result<(Self, Duration)> {
        let t0 = Instant::now();
        let mut child =
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("starting a tracer")?;
        let (tx, rx) = mpsc::channel();
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as _),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
        }
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(l) if l.trim() == ready => break,
                Ok(l) => seen.push(l),
                Err(_) => {
                    let _ = child.kill();
                    bail!("tracer {c:?} never became ready:\n{}", seen.join("\n"));
                }
            }
        }
        Ok((Self(Some(child)), t0.elapsed()))
    }
}

impl Tracer {
    fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            interrupt(c.id());
            let _ = c.wait();
        }
    }
}

fn run_loop(b: &Built, mixed: bool, pairs: usize) -> anyhow::Result<f64> {
    let mut c = Command::new(&b.workload);
    c.arg("--libcuda").arg(&b.libcuda).args([
        "--scenario",
        "loop",
        "--size",
        "4096",
        "--iterations",
        &pairs.to_string(),
    ]);
    if mixed {
        c.arg("--mix");
    }
    let text = output(&mut c)?;
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).with_context(|| format!("loop printed `{text}`"))?;
    v["ns_per_pair"].as_f64().context("no ns_per_pair")
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// What the repetitions collect.
#[derive(Default)]
struct Collected {
    samples: BTreeMap<(&'static str, &'static str), Vec<f64>>,
    attach_ms: Vec<f64>,
    verified: Option<verifier::Verified>,
    runtimes: BTreeMap<&'static str, Vec<runtime::Runtime>>,
    runtime_missing: Option<String>,
}

/// How to start `config`'s tracer and the line it says when ready; None
/// for `untraced`, Err when it cannot run here (bpftrace missing).
fn tracer_command(
    config: &str,
    b: &Built,
    script: &Path,
    bpftrace: &Result<PathBuf, String>,
) -> Result<Option<(Command, &'static str)>, ()> {
    let agent = |verb: &str| {
        let mut c = Command::new(&b.agent);
        c.arg(verb).arg("--libcuda").arg(&b.libcuda);
        c
    };
    Ok(match config {
        "untraced" => None,
        "floor" => Some((agent("floor"), "gpumem: ready")),
        "gpumem" | "gpumem+limits" => {
            let mut c = agent("run");
            c.arg("--output").arg(b.out.join("events.jsonl"));
            c.arg("--socket").arg(b.out.join("gpumem.sock")).args(["--rescan", "0"]);
            if config == "gpumem+limits" {
                c.args(["--limit", "cgroup:/=1TiB,action=audit"]);
            }
            Some((c, "gpumem: ready"))
        }
        _ => {
            let mut c = Command::new(bpftrace.as_ref().map_err(|_| ())?);
            c.arg(script);
            Some((c, "ready"))
        }
    })
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
        for (name, mixed, n) in [("alloc_free", false, pairs), ("mixed", true, mixed_pairs)] {
            if config == "bpftrace" && mixed {
                continue; // the script covers cuMemAlloc_v2/cuMemFree_v2 only
            }
            self.samples.entry((config, name)).or_default().push(run_loop(b, mixed, n)?);
        }
        if let (Some(pid), None) = (tracer.as_ref().and_then(|t| t.0.pid()), &self.runtime_missing) {
            match runtime::measure(pid, || run_loop(b, false, pairs).map(drop)) {
                Ok(r) => self.runtimes.entry(config).or_default().push(r),
                Err(e) => self.runtime_missing = Some(format!("{e:#}")),
            }
        }
        Ok(())
    }
}

pub fn bench(quick: bool) -> anyhow::Result<()> {
    if !is_root() {
        bail!("cargo xtask bench loads eBPF programs: run it as root");
    }
    let b = build()?;
    let (reps, pairs, mixed_pairs) = if quick { (3, 20_000, 4_000) } else { (7, 100_000, 20_000) };
    let bpftrace = bpftrace();
    let script = b.out.join("gpumem.bt");
    std::fs::write(&script, bpftrace_script(&b.libcuda))?;
    let mut c = Collected::default();
    for rep in 0..reps {
        eprintln!("xtask: bench repetition {}/{reps}", rep + 1);
        for config in CONFIGS {
            let Ok(command) = tracer_command(config, &b, &script, &bpftrace) else { continue };
            let tracer = command.map(|(cmd, ready)| Tracer::start(cmd, ready)).transpose()?;
            c.measure(config, tracer, &b, (pairs, mixed_pairs))?;
        }
    }
    let _ = std::fs::remove_file(b.out.join("events.jsonl"));
    eprintln!("xtask: bench: the agent under load");
    let load = load::measure(&b, quick)?;
    let run = report::Run {
        reps,
        pairs,
        mixed_pairs,
        attach_ms: median(c.attach_ms),
        verified: c.verified.unwrap_or_default(),
        runtimes: c.runtimes,
        runtime_missing: c.runtime_missing,
        bpftrace_missing: bpftrace.err(),
    };
    report::write(&b.out, &c.samples, &run, &load)
}
