//! target/bench/report.md (a table a person reads) and report.json
//! (numbers a script reads).
use std::{collections::BTreeMap, path::Path};

use serde_json::{json, Value};

use super::{
    load::AgentLoad,
    runtime::{per_pair, Runtime},
    setup::{median, CONFIGS, LOOPS},
};

/// How the run was made.
pub struct Run {
    pub reps: usize,
    pub pairs: usize,
    pub mixed_pairs: usize,
    pub attach_ms: Option<f64>,
    /// Instructions the verifier processed, per program of the agent.
    pub verified: super::verifier::Verified,
    /// Per configuration, one record of its programs' run time per
    /// repetition (see `runtime`).
    pub runtimes: BTreeMap<&'static str, Vec<Runtime>>,
    /// The same over the `cuMemAllocAsync`+`cuMemFreeAsync` loop (every
    /// tracer but bpftrace, whose script does not trace it).
    pub pool_runtimes: BTreeMap<&'static str, Vec<Runtime>>,
    /// Why the programs' run time was not measured, if it was not.
    pub runtime_missing: Option<String>,
    pub bpftrace_missing: Option<String>,
}

/// The median alloc+free (or mixed) time of a configuration.
fn med(samples: &Samples, c: &str, l: &str) -> Option<f64> {
    samples.get(&(c, l)).and_then(|v| median(v.clone()))
}

/// The median of each repetition's ratio `a / b` of alloc+free loops. Each
/// is of two loops run a second or two apart; the median of those follows
/// the host's drift less than a ratio of medians taken minutes apart.
fn ratio(samples: &Samples, a: &str, b: &str) -> Option<f64> {
    loop_ratio(samples, a, b, "alloc_free")
}

/// [`ratio`] of loop `l`.
fn loop_ratio(samples: &Samples, a: &str, b: &str, l: &str) -> Option<f64> {
    per_repetition_ratio(samples.get(&(a, l)), samples.get(&(b, l)))
}

type Samples<'a> = BTreeMap<(&'a str, &'a str), Vec<f64>>;

pub fn write(
    out: &Path,
    samples: &Samples,
    run: &Run,
    load: &AgentLoad,
    nvidia: &super::nvidia::Section,
    attach: &super::attach::Section,
) -> anyhow::Result<()> {
    let machine = format!(
        "{} cores, kernel {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
    );
    let mut json = report_json(&machine, samples, run, load);
    json["nvidia"] = nvidia.json();
    json["attach"] = attach.json();
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&json)?)?;
    let md = report_md(&machine, samples, run, load) + &nvidia.markdown() + &attach.markdown();
    std::fs::write(out.join("report.md"), &md)?;
    println!("{md}");
    println!("written: {} and report.json", out.join("report.md").display());
    Ok(())
}

fn report_json(machine: &str, samples: &Samples, run: &Run, load: &AgentLoad) -> Value {
    let (program_pair, program_run) = programs(run, &run.runtimes);
    let pool = programs(run, &run.pool_runtimes);
    let mut pair_ns = serde_json::Map::new();
    for c in CONFIGS {
        let row: serde_json::Map<String, Value> = LOOPS
            .iter()
            .map(|&(l, _)| (l.to_string(), med(samples, c, l).map_or(Value::Null, |v| json!(v))))
            .collect();
        pair_ns.insert(c.into(), row.into());
    }
    let row_at = |name: &str| load.rows.iter().find(|r| r.load == name);
    let cpu_at = |name: &str| row_at(name).map(|r| r.agent_cpu_pct);
    json!({
        "machine": machine,
        "repetitions": run.reps,
        "pairs": { "alloc_free": run.pairs, "mixed": run.mixed_pairs },
        "pair_ns": pair_ns,
        "pair_ns_per_repetition": samples.iter().map(|((c, l), v)| (format!("{c}/{l}"), v.clone())).collect::<BTreeMap<_, _>>(),
        "ratio_vs_floor": ratio(samples, "gpumem", "floor"),
        "ratio_limits_vs_floor": ratio(samples, "gpumem+limits", "floor"),
        "ratio_hash_vs_floor": ratio(samples, "gpumem/hash", "floor"),
        "ratio_vs_bpftrace": ratio(samples, "gpumem", "bpftrace"),
        "pool_async_ratio_vs_floor": loop_ratio(samples, "gpumem", "floor", "pool_async"),
        "pool_async_ratio_limits_vs_floor": loop_ratio(samples, "gpumem+limits", "floor", "pool_async"),
        "pool_from_pool_ratio_vs_floor": loop_ratio(samples, "gpumem", "floor", "pool_from_pool"),
        "pool_async_ratio_hash_vs_floor": loop_ratio(samples, "gpumem/hash", "floor", "pool_async"),
        "attach_ms": run.attach_ms,
        "program_ns_per_pair": program_pair,
        "program_ns_per_run": program_run,
        "pool_async_program_ns_per_pair": pool.0,
        "pool_async_program_ns_per_run": pool.1,
        "verified_insns_total": run.verified.values().map(|&n| u64::from(n)).sum::<u64>(),
        "verified_insns": run.verified,
        "bpftrace": run.bpftrace_missing.clone().unwrap_or_else(|| "measured".into()),
        "saturation_events_per_s": load.saturation_events_per_s,
        "lost_records": load.lost_records,
        "produced_records": load.produced_records,
        "delivered_records": load.delivered_records,
        "agent_cpu_pct_idle": cpu_at("idle"),
        "agent_cpu_pct_at_1k": cpu_at("1k/s"),
        "agent_cpu_pct_at_10k": cpu_at("10k/s"),
        "agent_cpu_pct_at_saturation": cpu_at("saturation"),
        "agent_cpu_us_per_record_at_saturation": row_at("saturation").and_then(super::load::LoadRow::cpu_us_per_record_delivered),
        "agent_rss_mb_100k_live": load.agent_rss_mb_100k_live,
        "agent_allocated_mb_100k_live": load.agent_allocated_mb_100k_live,
        "ring_mapped_mb": load.ring_mapped_mb,
        "agent_load": load.rows,
    })
}

fn report_md(machine: &str, samples: &Samples, run: &Run, load: &AgentLoad) -> String {
    let f = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
    let r = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
    let (reps, pairs, mixed) = (run.reps, run.pairs, run.mixed_pairs);
    let mut md = format!(
        "# gpumem bench\n\n{machine}; {reps} interleaved repetitions, median (ratios: median of each repetition's ratio); {pairs} pairs a loop, {mixed} mixed pairs.\n\n| configuration | ns per alloc+free pair | ns per mixed pair | ns per cuMemAllocAsync+cuMemFreeAsync | ns per cuMemAllocFromPoolAsync+cuMemFreeAsync |\n| --- | --- | --- | --- | --- |\n"
    );
    for c in CONFIGS {
        let cells: Vec<String> = LOOPS.iter().map(|(l, _)| f(med(samples, c, l))).collect();
        md += &format!("| {c} | {} |\n", cells.join(" | "));
    }
    md += &format!(
        "\n| ratio | value |\n| --- | --- |\n| gpumem / floor | {} |\n| gpumem+limits / floor | {} |\n| gpumem/hash / floor | {} |\n| gpumem / bpftrace | {} |\n| pool loop (cuMemAllocAsync): gpumem / floor | {} |\n| pool loop (cuMemAllocAsync): gpumem+limits / floor | {} |\n| pool loop (cuMemAllocAsync): gpumem/hash / floor | {} |\n| pool loop (cuMemAllocFromPoolAsync): gpumem / floor | {} |\n| start to attached (ms) | {} |\n",
        r(ratio(samples, "gpumem", "floor")),
        r(ratio(samples, "gpumem+limits", "floor")),
        r(ratio(samples, "gpumem/hash", "floor")),
        r(ratio(samples, "gpumem", "bpftrace")),
        r(loop_ratio(samples, "gpumem", "floor", "pool_async")),
        r(loop_ratio(samples, "gpumem+limits", "floor", "pool_async")),
        r(loop_ratio(samples, "gpumem/hash", "floor", "pool_async")),
        r(loop_ratio(samples, "gpumem", "floor", "pool_from_pool")),
        f(run.attach_ms)
    );
    match &run.runtime_missing {
        Some(why) => md += &format!("\nTime inside the programs not measured: {why}\n"),
        None => {
            md += &runtime_table(run, "alloc+free pair", &run.runtimes);
            md += &runtime_table(run, "cuMemAllocAsync+cuMemFreeAsync pair", &run.pool_runtimes);
            md += "\nEach total includes the programs that run once per process (exec, contexts, exit), spread over the loop's pairs.\n";
        }
    }
    md += &verified_line(&run.verified);
    if let Some(why) = &run.bpftrace_missing {
        md += &format!("\nbpftrace not measured: {why}\n");
    }
    md + &load_table(load)
}

fn load_table(load: &AgentLoad) -> String {
    let mut md = "\nThe agent under load (one agent, streaming JSON Lines to a file):\n\n| load | records/s produced | agent CPU (% of a core) | agent CPU per record delivered (µs) | agent peak RSS (MB) | of it allocated (MB) | records lost |\n| --- | --- | --- | --- | --- | --- | --- |\n".to_string();
    for row in &load.rows {
        let per_record = row.cpu_us_per_record_delivered().map_or("–".into(), |us| format!("{us:.2}"));
        md += &format!(
            "| {} | {:.0} | {:.1} | {per_record} | {:.1} | {:.1} | {} |\n",
            row.load,
            row.events_per_s,
            row.agent_cpu_pct,
            row.agent_peak_rss_mb,
            row.agent_peak_allocated_mb,
            row.records_lost
        );
    }
    md + &format!(
        "\nRecords produced {}, applied by the agent {}, lost in the kernel (counted) {}. `idle` is measured once the agent says it is idle (a second without a record: its drain timer stopped). The `100k live` rows hold {} allocations at once (`exits`: beside short loops, one process after another, for {} s, so that the agent sweeps what their exits leave while the spill is in the hash map). `saturation, in a pod` runs the saturation's loops in one pod's container cgroup (the kubelet's systemd layout, the pod and container named by `/var/log/pods` and `/var/log/containers`), so that every record carries the container and its pod. Peak RSS includes the kernel ring buffer ({} MiB by default) twice, {:.1} MB resident: the kernel maps its pages twice into the agent, for records that wrap. `allocated` is the peak less the pages mapped from files (the binary, libraries, the ring buffer).\n",
        load.produced_records,
        load.delivered_records,
        load.lost_records,
        load.live_allocations,
        super::load::EXITS_BESIDE.as_secs(),
        gpumem_common::EVENTS_BYTES >> 20,
        load.ring_mapped_mb
    )
}

/// One sentence on what the verifier walked: the total and the costliest
/// programs.
fn verified_line(v: &super::verifier::Verified) -> String {
    if v.is_empty() {
        return String::new();
    }
    let total: u64 = v.values().map(|&n| u64::from(n)).sum();
    let mut costly: Vec<(&String, &u32)> = v.iter().collect();
    costly.sort_by(|a, b| b.1.cmp(a.1));
    let top: Vec<String> = costly.iter().take(4).map(|(n, c)| format!("{n} {c}")).collect();
    format!(
        "\nStart-up is mostly the kernel verifying the agent's programs: it processed {total} instructions over {} programs (costliest: {}).\n",
        v.len(),
        top.join(", ")
    )
}

/// The median over the repetitions of `a`'s time over `b`'s in the same
/// repetition.
fn per_repetition_ratio(a: Option<&Vec<f64>>, b: Option<&Vec<f64>>) -> Option<f64> {
    let (a, b) = (a?, b?);
    median(a.iter().zip(b).filter(|(_, &y)| y > 0.0).map(|(x, y)| x / y).collect())
}

/// Per configuration, the time inside its programs per pair of a loop and
/// each program's run (`runtimes`: `Run::runtimes` or
/// `Run::pool_runtimes`), as medians over the repetitions.
type Programs = (BTreeMap<&'static str, f64>, BTreeMap<&'static str, BTreeMap<String, ProgramRow>>);

fn programs(run: &Run, runtimes: &BTreeMap<&'static str, Vec<Runtime>>) -> Programs {
    (program_ns_per_pair(run, runtimes), program_rows(run, runtimes))
}

/// Median over the repetitions of each configuration's time inside its
/// programs per pair of a loop (`runtimes`: `Run::runtimes` or
/// `Run::pool_runtimes`).
fn program_ns_per_pair(
    run: &Run,
    runtimes: &BTreeMap<&'static str, Vec<Runtime>>,
) -> BTreeMap<&'static str, f64> {
    runtimes
        .iter()
        .filter_map(|(&c, reps)| {
            median(reps.iter().map(|r| per_pair(r, run.pairs)).collect()).map(|v| (c, v))
        })
        .collect()
}

/// One program's median over the repetitions.
#[derive(serde::Serialize)]
struct ProgramRow {
    ns_per_run: f64,
    /// Below 1: it does not run every pair (a process's exec, contexts,
    /// exit).
    runs_per_pair: f64,
}

/// Each configuration's programs in a loop, as medians over the
/// repetitions.
fn program_rows(
    run: &Run,
    runtimes: &BTreeMap<&'static str, Vec<Runtime>>,
) -> BTreeMap<&'static str, BTreeMap<String, ProgramRow>> {
    runtimes
        .iter()
        .map(|(&c, reps)| {
            let mut per: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
            for (name, t) in reps.iter().flatten() {
                let e = per.entry(name.clone()).or_default();
                e.0.extend(t.ns_per_run());
                e.1.push(t.runs as f64 / run.pairs.max(1) as f64);
            }
            let rows = per.into_iter().filter_map(|(n, (ns, runs))| {
                Some((n, ProgramRow { ns_per_run: median(ns)?, runs_per_pair: median(runs)? }))
            });
            (c, rows.collect())
        })
        .collect()
}

/// The programs' share of a pair of the loop `what` names, per
/// configuration, as a table.
fn runtime_table(run: &Run, what: &str, runtimes: &BTreeMap<&'static str, Vec<Runtime>>) -> String {
    let (pair, rows) = programs(run, runtimes);
    let mut md = format!(
        "\nTime inside each tracer's programs, {what} (the kernel's run-time statistics, on for one more loop of {} pairs per repetition; median):\n\n| configuration | ns per pair inside its programs | ns per run, programs run every pair |\n| --- | --- | --- |\n",
        run.pairs
    );
    for (c, ns) in &pair {
        // The programs of the loop itself; the rest run once per process,
        // counted in the total.
        let progs: Vec<String> = rows
            .get(c)
            .into_iter()
            .flatten()
            .filter(|(_, r)| r.runs_per_pair >= 1.0)
            .map(|(n, r)| format!("{n} {:.0}", r.ns_per_run))
            .collect();
        md += &format!("| {c} | {ns:.0} | {} |\n", progs.join(", "));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::per_repetition_ratio;

    #[test]
    fn ratios_pair_each_repetition_with_its_own() {
        // The host slows down in the third repetition: the ratio does not.
        let a = vec![110.0, 120.0, 330.0];
        let b = vec![100.0, 100.0, 300.0];
        assert_eq!(per_repetition_ratio(Some(&a), Some(&b)), Some(1.1));
        assert_eq!(per_repetition_ratio(Some(&a), None), None);
        assert_eq!(per_repetition_ratio(Some(&a), Some(&vec![])), None);
    }
}
