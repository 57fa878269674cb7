//! What every configuration of the bench shares: the release build, the
//! configurations and loops, bpftrace and its script, the workload's loop.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::util::{output, target_dir};

/// `gpumem/hash`: the agent with every call in flight kept in the
/// `PENDING` hash map (`GPUMEM_TASK_CALLS=off`), as before task storage
/// and wherever the kernel has no BTF: what task storage saves, side by
/// side.
pub const CONFIGS: [&str; 6] = ["untraced", "floor", "gpumem", "gpumem+limits", "gpumem/hash", "bpftrace"];
/// The loops each configuration runs, with the workload's arguments:
/// cuMemAlloc_v2+cuMemFree_v2, the families in turn, and the stream-ordered
/// pool pairs (cuMemAllocAsync or cuMemAllocFromPoolAsync, each with
/// cuMemFreeAsync).
pub const LOOPS: [(&str, &[&str]); 4] = [
    ("alloc_free", &[]),
    ("mixed", &["--mix"]),
    ("pool_async", POOL_LOOP_ARGS),
    ("pool_from_pool", &["--pool", "from-pool"]),
];
/// The workload's arguments for the `cuMemAllocAsync`+`cuMemFreeAsync`
/// loop, whose programs' time the report gives beside the plain loop's.
pub const POOL_LOOP_ARGS: &[&str] = &["--pool", "async"];

pub struct Built {
    pub agent: PathBuf,
    pub workload: PathBuf,
    pub libcuda: PathBuf,
    pub out: PathBuf,
}

impl Built {
    /// The same workload, driver and output directory with `agent` in
    /// place of this build's (the `--*-against` comparisons).
    pub fn with_agent(&self, agent: PathBuf) -> Self {
        Self { agent, workload: self.workload.clone(), libcuda: self.libcuda.clone(), out: self.out.clone() }
    }
}

pub fn build() -> anyhow::Result<Built> {
    let b = crate::artifacts::build_profile("release")?;
    Ok(Built { agent: b.agent, workload: b.workload, libcuda: b.libcuda, out: target_dir().join("bench") })
}

/// bpftrace from Debian's packages, installed if missing; None (with the
/// reason) if it cannot be had.
pub fn bpftrace() -> Result<PathBuf, String> {
    crate::util::ensure_tool("bpftrace", "bpftrace").map_err(|e| format!("{e:#}"))
}

/// The bpftrace equivalent: live allocations and per-process totals in maps,
/// at gpumem's probe sites (a free is final at its entry, as gpumem takes
/// it: no return probe).
pub fn bpftrace_script(lib: &Path) -> String {
    let l = lib.display();
    format!(
        r#"BEGIN {{ printf("ready\n"); }}
uprobe:{l}:cuMemAlloc_v2 {{ @ptr[tid] = arg0; @req[tid] = arg1; }}
uretprobe:{l}:cuMemAlloc_v2 /@ptr[tid]/ {{
  if (retval == 0) {{ $a = *(uint64 *)@ptr[tid]; @live[pid, $a] = @req[tid]; @held[pid] += @req[tid]; }}
  delete(@ptr[tid]); delete(@req[tid]);
}}
uprobe:{l}:cuMemFree_v2 {{ @held[pid] -= @live[pid, arg0]; delete(@live[pid, arg0]); }}
END {{ clear(@live); clear(@ptr); clear(@req); }}
"#
    )
}

/// One of [`LOOPS`] (its arguments) on the simulated driver.
pub fn run_loop(b: &Built, args: &[&str], pairs: usize) -> anyhow::Result<f64> {
    time_loop(&b.workload, &b.libcuda, args, pairs)
}

/// [`run_loop`] with the workload in cgroup `dir` (a cgroup v2 directory)
/// from its start.
pub fn run_loop_in(b: &Built, args: &[&str], pairs: usize, dir: &Path) -> anyhow::Result<f64> {
    loop_output(workload_in(b, dir), &b.libcuda, args, pairs)
}

/// The workload, to be given its arguments, started in cgroup `dir` (a
/// cgroup v2 directory): a shell moves itself there and execs it.
pub fn workload_in(b: &Built, dir: &Path) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", r#"echo 0 > "$0/cgroup.procs" && exec "$@""#]).arg(dir).arg(&b.workload);
    c
}

/// The workload's `loop` scenario on `libcuda` with `extra` arguments:
/// nanoseconds per iteration.
pub fn time_loop(workload: &Path, libcuda: &Path, extra: &[&str], iterations: usize) -> anyhow::Result<f64> {
    loop_output(Command::new(workload), libcuda, extra, iterations)
}

fn loop_output(mut c: Command, libcuda: &Path, extra: &[&str], iterations: usize) -> anyhow::Result<f64> {
    c.arg("--libcuda").arg(libcuda).args(["--scenario", "loop", "--size", "4096", "--iterations"]);
    c.arg(iterations.to_string()).args(extra);
    let text = output(&mut c)?;
    let v: serde_json::Value =
        serde_json::from_str(text.trim()).with_context(|| format!("loop printed `{text}`"))?;
    v["ns_per_iteration"].as_f64().context("no ns_per_iteration")
}

/// `measure(0)` (the other agent) and `measure(1)` (this build's), each
/// `rounds` times, the order swapped every round so that a host drifting
/// in speed moves both sides of a round: each round's [other, this].
pub fn alternately<T>(
    what: &str,
    rounds: usize,
    mut measure: impl FnMut(usize) -> anyhow::Result<T>,
) -> anyhow::Result<Vec<[T; 2]>> {
    let mut out = Vec::with_capacity(rounds);
    for round in 0..rounds {
        eprintln!("xtask: bench {what}: round {}/{rounds}", round + 1);
        let first = round % 2;
        let (a, b) = (measure(first)?, measure(1 - first)?);
        out.push(if first == 0 { [a, b] } else { [b, a] });
    }
    Ok(out)
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}
