//! `cargo xtask bench --load-against AGENT`: this build's agent and
//! another build's (a release `gpumem` of an earlier commit, say) under
//! the same loads (`load`), one agent at a time, alternately, `rounds`
//! times, the order swapped each round: an agent change measured before
//! and after side by side, on a host whose speed drifts more than most
//! changes move it. Each figure is the median of its rounds, each ratio
//! the median of each round's own ratio (this / other).
use std::{collections::BTreeMap, path::Path};

use anyhow::Context;
use serde_json::json;

use super::{
    load::{self, LoadRow},
    setup::{alternately, median, Built},
};

/// One figure of a row: CPU, peak RSS, allocated or records lost.
type Figure = fn(&LoadRow) -> f64;

const FIGURES: [(&str, Figure); 5] = [
    ("agent CPU (% of a core)", |r| r.agent_cpu_pct),
    // Per record applied, not produced: an agent starved into losing
    // records would otherwise look cheaper by what it never read.
    ("agent CPU per record delivered (µs)", |r| r.cpu_us_per_record_delivered().unwrap_or(0.0)),
    ("peak RSS (MB)", |r| r.agent_peak_rss_mb),
    ("allocated (MB)", |r| r.agent_peak_allocated_mb),
    ("records lost", |r| r.records_lost as f64),
];

/// Rows per load, per round: [other, this].
type Rounds = BTreeMap<String, Vec<[LoadRow; 2]>>;

pub fn compare(b: &Built, other: &Path, rounds: usize, quick: bool) -> anyhow::Result<()> {
    let other = other.canonicalize().with_context(|| format!("the other agent, {}", other.display()))?;
    let mut by_load = Rounds::new();
    let rounds_rows = alternately("--load-against", rounds, |which| {
        let agent = if which == 0 { other.clone() } else { b.agent.clone() };
        Ok(load::measure(&b.with_agent(agent), quick)?.rows)
    })?;
    for [theirs, ours] in rounds_rows {
        for (t, o) in theirs.into_iter().zip(ours) {
            by_load.entry(t.load.clone()).or_default().push([t, o]);
        }
    }
    let (md, json) = (markdown(&by_load, &other, rounds), to_json(&by_load, &other));
    std::fs::write(b.out.join("load_against.json"), serde_json::to_string_pretty(&json)?)?;
    println!("{md}");
    println!("written: {}", b.out.join("load_against.json").display());
    Ok(())
}

/// The median of one figure over the rounds for [other, this], and of
/// each round's ratio this / other.
fn medians(rounds: &[[LoadRow; 2]], figure: Figure) -> (Option<f64>, Option<f64>, Option<f64>) {
    let side = |i: usize| median(rounds.iter().map(|r| figure(&r[i])).collect());
    let ratios = rounds.iter().filter(|r| figure(&r[0]) > 0.0).map(|r| figure(&r[1]) / figure(&r[0]));
    (side(0), side(1), median(ratios.collect()))
}

fn markdown(by_load: &Rounds, other: &Path, rounds: usize) -> String {
    let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.2}"));
    let mut md = format!(
        "# The agent under load: this build against {}\n\nOne agent at a time, alternately, {rounds} rounds; medians (ratio: the median of each round's this / other).\n\n| load | figure | other | this | this / other |\n| --- | --- | --- | --- | --- |\n",
        other.display()
    );
    for (load, rounds) in by_load {
        for (name, figure) in FIGURES {
            let (theirs, ours, ratio) = medians(rounds, figure);
            md += &format!("| {load} | {name} | {} | {} | {} |\n", f(theirs), f(ours), f(ratio));
        }
    }
    md
}

fn to_json(by_load: &Rounds, other: &Path) -> serde_json::Value {
    let loads: BTreeMap<&str, serde_json::Value> = by_load
        .iter()
        .map(|(load, rounds)| {
            let figures: BTreeMap<&str, serde_json::Value> = FIGURES
                .iter()
                .map(|(name, figure)| {
                    let (theirs, ours, ratio) = medians(rounds, *figure);
                    (*name, json!({ "other": theirs, "this": ours, "ratio": ratio }))
                })
                .collect();
            (load.as_str(), json!({ "figures": figures, "rounds": rounds }))
        })
        .collect();
    json!({ "other": other.display().to_string(), "loads": loads })
}
