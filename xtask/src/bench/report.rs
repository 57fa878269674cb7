//! target/bench/report.md (a table a person reads) and report.json
//! (numbers a script reads).
use std::{collections::BTreeMap, path::Path};

use serde_json::{json, Value};

use super::{load::AgentLoad, median, CONFIGS, LOOPS};

/// How the run was made.
pub struct Run {
    pub reps: usize,
    pub pairs: usize,
    pub mixed_pairs: usize,
    pub attach_ms: Option<f64>,
    /// Instructions the verifier processed, per program of the agent.
    pub verified: super::verifier::Verified,
    pub bpftrace_missing: Option<String>,
}

pub fn write(
    out: &Path,
    samples: &BTreeMap<(&str, &str), Vec<f64>>,
    run: &Run,
    load: &AgentLoad,
) -> anyhow::Result<()> {
    let med = |c: &str, l: &str| samples.get(&(c, l)).and_then(|v| median(v.clone()));
    let ratio = |a: &str, b: &str| match (med(a, "alloc_free"), med(b, "alloc_free")) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    };
    let mut pair_ns = serde_json::Map::new();
    for c in CONFIGS {
        let row: serde_json::Map<String, Value> =
            LOOPS.iter().map(|&l| (l.to_string(), med(c, l).map_or(Value::Null, |v| json!(v)))).collect();
        pair_ns.insert(c.into(), row.into());
    }
    let machine = format!(
        "{} cores, kernel {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
    );
    let cpu_at = |name: &str| load.rows.iter().find(|r| r.load == name).map(|r| r.agent_cpu_pct);
    let json = json!({
        "machine": machine,
        "repetitions": run.reps,
        "pairs": { "alloc_free": run.pairs, "mixed": run.mixed_pairs },
        "pair_ns": pair_ns,
        "ratio_vs_floor": ratio("gpumem", "floor"),
        "ratio_limits_vs_floor": ratio("gpumem+limits", "floor"),
        "ratio_vs_bpftrace": ratio("gpumem", "bpftrace"),
        "attach_ms": run.attach_ms,
        "verified_insns_total": run.verified.values().map(|&n| u64::from(n)).sum::<u64>(),
        "verified_insns": run.verified,
        "bpftrace": run.bpftrace_missing.clone().unwrap_or_else(|| "measured".into()),
        "saturation_events_per_s": load.saturation_events_per_s,
        "lost_records": load.lost_records,
        "produced_records": load.produced_records,
        "delivered_records": load.delivered_records,
        "agent_cpu_pct_at_1k": cpu_at("1k/s"),
        "agent_cpu_pct_at_10k": cpu_at("10k/s"),
        "agent_cpu_pct_at_saturation": cpu_at("saturation"),
        "agent_rss_mb_100k_live": load.agent_rss_mb_100k_live,
        "agent_load": load.rows,
    });
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&json)?)?;
    let f = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
    let r = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
    let (reps, pairs, mixed) = (run.reps, run.pairs, run.mixed_pairs);
    let mut md = format!(
        "# gpumem bench\n\n{machine}; {reps} interleaved repetitions, median; {pairs} alloc+free pairs, {mixed} mixed pairs.\n\n| configuration | ns per alloc+free pair | ns per mixed pair |\n| --- | --- | --- |\n"
    );
    for c in CONFIGS {
        md += &format!("| {c} | {} | {} |\n", f(med(c, "alloc_free")), f(med(c, "mixed")));
    }
    md += &format!(
        "\n| ratio | value |\n| --- | --- |\n| gpumem / floor | {} |\n| gpumem+limits / floor | {} |\n| gpumem / bpftrace | {} |\n| start to attached (ms) | {} |\n",
        r(ratio("gpumem", "floor")),
        r(ratio("gpumem+limits", "floor")),
        r(ratio("gpumem", "bpftrace")),
        f(run.attach_ms)
    );
    md += &verified_line(&run.verified);
    if let Some(why) = &run.bpftrace_missing {
        md += &format!("\nbpftrace not measured: {why}\n");
    }
    md += "\nThe agent under load (one agent, streaming JSON Lines to a file):\n\n| load | records/s produced | agent CPU (% of a core) | agent peak RSS (MB) |\n| --- | --- | --- | --- |\n";
    for row in &load.rows {
        md += &format!(
            "| {} | {:.0} | {:.1} | {:.1} |\n",
            row.load, row.events_per_s, row.agent_cpu_pct, row.agent_peak_rss_mb
        );
    }
    md += &format!(
        "\nRecords produced {}, applied by the agent {}, lost in the kernel (counted) {}. The `100k live` row holds {} allocations at once. Peak RSS includes the kernel ring buffer ({} MiB by default) twice: the kernel maps its pages twice into the agent, for records that wrap.\n",
        load.produced_records,
        load.delivered_records,
        load.lost_records,
        load.live_allocations,
        gpumem_common::EVENTS_BYTES >> 20
    );
    std::fs::write(out.join("report.md"), &md)?;
    println!("{md}");
    println!("written: {} and report.json", out.join("report.md").display());
    Ok(())
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
