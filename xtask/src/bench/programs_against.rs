//! `cargo xtask bench --programs-against AGENT [--against-env K=V]`: the
//! time inside this build's programs and inside another agent's (another
//! build's release `gpumem`, or this one with `--against-env`, e.g.
//! `GPUMEM_TASK_CALLS=off`), per pair of the plain and the stream-ordered
//! pool loops, from the kernel's run-time statistics (`runtime`). One
//! agent at a time, alternately, the order swapped each round: a program
//! change measured before and after side by side, on a host whose speed
//! drifts more than most changes move it. With `--together`, both agents
//! attached at once, so that both builds' programs run at the very same
//! hits (the kernel runs a site's programs one after the other, the
//! newest attached first), each round swapping which attaches first:
//! what the host's drift leaves of a round then cancels within it.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;
use serde_json::json;

use super::{
    runtime::{self, Runtime},
    setup::{alternately, median, run_loop, run_loop_in, Built},
    tracer::Tracer,
};

/// `--programs-against`: the other agent, its environment, the limits
/// both agents run with, how deep in the cgroup tree the loops run, and
/// whether both agents run at once (`--together`).
pub struct Against<'a> {
    pub agent: &'a Path,
    pub env: &'a [String],
    pub limits: &'a [String],
    pub cgroup_depth: u32,
    pub together: bool,
}

/// The loops measured, with the workload's arguments.
const LOOPS: [(&str, &[&str]); 2] = [("alloc_free", &[]), ("pool_async", &["--pool", "async"])];

/// Per loop, per round: [other, this].
type Rounds = BTreeMap<&'static str, Vec<[Runtime; 2]>>;

pub fn compare(b: &Built, against: &Against<'_>, rounds: usize, pairs: usize) -> anyhow::Result<()> {
    let other = against.agent;
    let other = other.canonicalize().with_context(|| format!("the other agent, {}", other.display()))?;
    let env = parse_env(against.env)?;
    let nested = Nested::create(against.cgroup_depth)?;
    // Agent 0 is the other, 1 this build's; `n` numbers its files.
    let command = |which: usize, n: usize| {
        let mut c = Command::new(if which == 0 { &other } else { &b.agent });
        c.arg("run")
            .arg("--libcuda")
            .arg(&b.libcuda)
            .arg("--output")
            .arg(b.out.join(format!("events-{n}.jsonl")));
        c.arg("--socket").arg(b.out.join(format!("gpumem-{n}.sock"))).args(["--rescan", "0"]);
        for spec in against.limits {
            c.arg("--limit").arg(spec);
        }
        if which == 0 {
            c.envs(env.iter().map(|(k, v)| (k, v)));
        }
        c
    };
    let run_loops = |args: &[&str]| match &nested {
        Some(n) => run_loop_in(b, args, pairs, n.leaf()).map(drop),
        None => run_loop(b, args, pairs).map(drop),
    };
    let rounds_runs = if against.together {
        together(rounds, command, run_loops)?
    } else {
        alternately("--programs-against", rounds, |which| {
            let (tracer, _) = Tracer::start(command(which, 0), "gpumem: ready")?;
            let pid = tracer.pid().context("the agent has no pid")?;
            LOOPS
                .iter()
                .map(|(_, args)| runtime::measure(pid, || run_loops(args)))
                .collect::<anyhow::Result<Vec<Runtime>>>()
        })?
    };
    let mut by_loop = Rounds::new();
    for [theirs, ours] in rounds_runs {
        for ((name, _), (t, o)) in LOOPS.iter().zip(theirs.into_iter().zip(ours)) {
            by_loop.entry(name).or_default().push([t, o]);
        }
    }
    for n in 0..2 {
        let _ = std::fs::remove_file(b.out.join(format!("events-{n}.jsonl")));
    }
    let mut label = describe(&other, &env);
    if against.together {
        label += ", both attached at once (each round swaps which attached first)";
    }
    if !against.limits.is_empty() {
        label += &format!(" (both with --limit {})", against.limits.join(" --limit "));
    }
    if let Some(n) = &nested {
        label += &format!(", the loops in {}", n.leaf().display());
    }
    println!("{}", markdown(&by_loop, &label, rounds, pairs));
    let json = to_json(&by_loop, &label, pairs);
    std::fs::write(b.out.join("programs_against.json"), serde_json::to_string_pretty(&json)?)?;
    println!("written: {}", b.out.join("programs_against.json").display());
    Ok(())
}

/// `--together`: each round starts both agents (`command(which, n)`, 0 the
/// other, 1 this build's; the round's first attached is the other in
/// even rounds), runs every loop with `run_loops`, and measures both over
/// the same loop: each round's [other, this] per loop.
fn together(
    rounds: usize,
    command: impl Fn(usize, usize) -> Command,
    run_loops: impl Fn(&[&str]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<[Vec<Runtime>; 2]>> {
    (0..rounds)
        .map(|round| {
            eprintln!("xtask: bench --programs-against --together: round {}/{rounds}", round + 1);
            let first = round % 2;
            let (a, _) = Tracer::start(command(first, 0), "gpumem: ready")?;
            let (b, _) = Tracer::start(command(1 - first, 1), "gpumem: ready")?;
            let pids = [&a, &b].map(|t| t.pid().context("the agent has no pid"));
            let [pa, pb] = pids;
            let pids = [pa?, pb?];
            let mut out = [Vec::new(), Vec::new()];
            for (_, args) in LOOPS {
                let [ra, rb] = runtime::measure_each(pids, || run_loops(args))?;
                out[first].push(ra);
                out[1 - first].push(rb);
            }
            Ok(out)
        })
        .collect()
}

/// A cgroup `depth` levels below the root for the loops, with the
/// directories made for it, removed after them (`--cgroup-depth`).
struct Nested {
    leaf: PathBuf,
    /// Outermost first.
    made: Vec<PathBuf>,
}

impl Nested {
    fn create(depth: u32) -> anyhow::Result<Option<Self>> {
        if depth == 0 {
            return Ok(None);
        }
        let mut leaf = crate::util::cgroup2_root()?.join("gpumem-bench");
        for level in 1..depth {
            leaf = leaf.join(level.to_string());
        }
        let mut made = Vec::new();
        for dir in leaf.ancestors().take(depth as usize).collect::<Vec<_>>().into_iter().rev() {
            if !dir.exists() {
                std::fs::create_dir(dir)
                    .with_context(|| format!("--cgroup-depth: making cgroup {}", dir.display()))?;
                made.push(dir.to_path_buf());
            }
        }
        Ok(Some(Nested { leaf, made }))
    }

    fn leaf(&self) -> &Path {
        &self.leaf
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        // The loops have exited, so each is empty; deepest first.
        for d in self.made.iter().rev() {
            if let Err(e) = std::fs::remove_dir(d) {
                eprintln!("xtask: bench: removing cgroup {}: {e}", d.display());
            }
        }
    }
}

/// `K=V` pairs for the other agent's environment.
fn parse_env(env: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    env.iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--against-env {kv:?}: expected NAME=VALUE"))
        })
        .collect()
}

fn describe(other: &Path, env: &[(String, String)]) -> String {
    let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    match vars.is_empty() {
        true => other.display().to_string(),
        false => format!("{} {}", vars.join(" "), other.display()),
    }
}

/// Median and range over the rounds of `f` for [other, this].
fn stats(rounds: &[[Runtime; 2]], f: impl Fn(&Runtime) -> Option<f64>) -> [(f64, f64, f64); 2] {
    [0, 1].map(|i| {
        let v: Vec<f64> = rounds.iter().filter_map(|r| f(&r[i])).collect();
        let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        (median(v).unwrap_or(f64::NAN), lo, hi)
    })
}

/// The geometric mean over the rounds of each round's this / other, by
/// `f`: over an even number of `--together` rounds, the advantage of
/// running second at a hit cancels (half the rounds give it to each).
fn round_ratio(rounds: &[[Runtime; 2]], f: impl Fn(&Runtime) -> Option<f64>) -> f64 {
    let logs: Vec<f64> = rounds.iter().filter_map(|r| Some((f(&r[1])? / f(&r[0])?).ln())).collect();
    (logs.iter().sum::<f64>() / logs.len().max(1) as f64).exp()
}

fn markdown(by_loop: &Rounds, label: &str, rounds: usize, pairs: usize) -> String {
    let mut md = format!(
        "# Inside the programs: this build against {label}\n\n{rounds} rounds, {pairs} pairs a loop; ns per pair (or per run), median (lowest-highest); the rounds' own this / other, geometric mean\n\n| loop | what | other | this | this / other | rounds' this / other |\n| --- | --- | --- | --- | --- | --- |\n"
    );
    let cell = |(m, lo, hi): (f64, f64, f64)| format!("{m:.0} ({lo:.0}-{hi:.0})");
    for (name, rounds) in by_loop {
        let per_pair = |r: &Runtime| Some(runtime::per_pair(r, pairs));
        let [o, t] = stats(rounds, per_pair);
        let g = round_ratio(rounds, per_pair);
        md += &format!("| {name} | per pair | {} | {} | {:.3} | {g:.3} |\n", cell(o), cell(t), t.0 / o.0);
        // The loop's own programs, run every pair; the rest run once per
        // process (exec, contexts, exit), counted in the pair's total.
        let programs: std::collections::BTreeSet<&String> = rounds
            .iter()
            .flat_map(|r| r[1].iter())
            .filter(|(_, t)| t.runs >= pairs as u64)
            .map(|(n, _)| n)
            .collect();
        for p in programs {
            let per_run = |r: &Runtime| r.get(p).and_then(|x| x.ns_per_run());
            let [o, t] = stats(rounds, per_run);
            let g = round_ratio(rounds, per_run);
            md += &format!(
                "| {name} | {p}, per run | {} | {} | {:.3} | {g:.3} |\n",
                cell(o),
                cell(t),
                t.0 / o.0
            );
        }
    }
    md
}

fn to_json(by_loop: &Rounds, label: &str, pairs: usize) -> serde_json::Value {
    let loops: serde_json::Map<String, serde_json::Value> = by_loop
        .iter()
        .map(|(name, rounds)| {
            let per_pair: Vec<[f64; 2]> =
                rounds.iter().map(|r| [0, 1].map(|i| runtime::per_pair(&r[i], pairs))).collect();
            (name.to_string(), json!({ "ns_per_pair_other_this": per_pair }))
        })
        .collect();
    json!({ "other": label, "pairs": pairs, "loops": loops })
}
