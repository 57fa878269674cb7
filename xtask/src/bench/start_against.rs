//! `cargo xtask bench --start-against AGENT`: this build's agent and
//! another build's started one after the other, `rounds` times, the order
//! swapped each round, each timed from its start to `gpumem: ready` (as
//! `attach.rs` times a start, one library, multi links where the kernel
//! has them): a start-up change measured before and after side by side,
//! on a host whose speed drifts more than most changes move it. Each
//! figure is the median of its rounds, the ratio the median of each
//! round's own ratio (this / other).
use std::path::Path;

use anyhow::Context;
use serde_json::json;

use super::{
    attach,
    setup::{alternately, median, Built},
};

pub fn compare(b: &Built, other: &Path, rounds: usize, on_nvidia: bool) -> anyhow::Result<()> {
    let other = other.canonicalize().with_context(|| format!("the other agent, {}", other.display()))?;
    let links = if attach::multi_refusal(b).is_none() { "multi" } else { "single" };
    let (libs, library) = if on_nvidia {
        (vec![super::nvidia::library_550()?.path], "NVIDIA's 550 libcuda")
    } else {
        (attach::copies(b, 1)?, "the simulated driver")
    };
    let timed = alternately("--start-against", rounds, |which| {
        let agent = if which == 0 { other.clone() } else { b.agent.clone() };
        let (ready_ms, link_ms, _, _) = attach::once(&b.with_agent(agent), links, &libs)?;
        Ok([ready_ms, link_ms])
    })?;
    let _ = std::fs::remove_dir_all(b.out.join("attach"));
    let side = |i: usize, f: usize| median(timed.iter().map(|r| r[i][f]).collect());
    let ratio = median(timed.iter().filter(|r| r[0][0] > 0.0).map(|r| r[1][0] / r[0][0]).collect());
    let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
    let range = |i: usize| {
        let v: Vec<f64> = timed.iter().map(|r| r[i][0]).collect();
        let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{lo:.1} to {hi:.1}")
    };
    println!(
        "# Start to ready: this build against {}\n\nOne agent at a time, alternately, {rounds} rounds, {links} links, \
         one library ({library}); medians (ratio: the median of each round's this / other).\n\n| agent | start to ready (ms) | \
         range (ms) | of it linking (ms) |\n| --- | --- | --- | --- |\n| other | {} | {} | {} |\n| this | {} | {} | {} \
         |\n\nthis / other, a round: {}\n",
        other.display(),
        f(side(0, 0)),
        range(0),
        f(side(0, 1)),
        f(side(1, 0)),
        range(1),
        f(side(1, 1)),
        ratio.map_or("–".into(), |r| format!("{r:.3}"))
    );
    let json = json!({
        "other": other.display().to_string(),
        "links": links,
        "library": library,
        "rounds": timed.iter().map(|r| json!({
            "other": { "ready_ms": r[0][0], "link_ms": r[0][1] },
            "this": { "ready_ms": r[1][0], "link_ms": r[1][1] },
        })).collect::<Vec<_>>(),
        "other_ready_ms": side(0, 0),
        "this_ready_ms": side(1, 0),
        "ratio": ratio,
    });
    let path = b.out.join("start_against.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
    println!("written: {}", path.display());
    Ok(())
}
