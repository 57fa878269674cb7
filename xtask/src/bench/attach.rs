//! Attaching and detaching: the agent started with 1 and with 20 copies of
//! the simulated driver (each its own inode, as container images give),
//! timed from its start to `gpumem: ready` (programs loaded and verified,
//! every probe attached; of it, the links alone, as the agent says each
//! library's took) and from SIGINT to its exit (every probe
//! detached: the kernel's uprobe teardown, which a stop waits for). With
//! multi-uprobe links (`--uprobe-links multi`, where the kernel has them)
//! and, for one library, single links beside them (20 libraries of single
//! links take minutes to stop).
use std::{path::PathBuf, process::Command, time::Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::{
    setup::{median, Built},
    tracer::Tracer,
};
use crate::util::interrupt;

/// What is measured: (`--uprobe-links`, libraries).
const CASES: [(&str, usize); 3] = [("multi", 1), ("multi", 20), ("single", 1)];

/// One case's medians.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    pub links: &'static str,
    pub libraries: usize,
    /// Probe-table rows the agent said it attached (each an entry probe,
    /// most with a return probe too).
    pub probes: usize,
    pub repetitions: usize,
    /// Start to `ready`: the verifier's time, then the links.
    pub attach_ms: Option<f64>,
    /// The links alone, the programs already verified: the sum of the
    /// agent's `attached ... in N ms` over the libraries.
    pub link_ms: Option<f64>,
    pub detach_ms: Option<f64>,
}

pub struct Section {
    pub rows: Vec<Row>,
    /// Why multi links were not measured.
    pub multi_refusal: Option<String>,
}

/// `count` copies of the simulated driver under `out/attach/`.
pub(super) fn copies(b: &Built, count: usize) -> anyhow::Result<Vec<PathBuf>> {
    (0..count)
        .map(|i| {
            let dir = b.out.join("attach").join(format!("lib{i}"));
            std::fs::create_dir_all(&dir)?;
            let path = dir.join("libcuda.so.1");
            std::fs::copy(&b.libcuda, &path)
                .with_context(|| format!("copying the driver to {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// Probes attached and the ms their links took, summed over the agent's
/// start-up lines (`gpumem: attached N probe(s) (R with a return probe)
/// to ... in MS ms`).
fn attached(lines: &[String]) -> (usize, f64) {
    lines.iter().filter_map(|l| l.strip_prefix("gpumem: attached ")).fold((0, 0.0), |(n, ms), l| {
        let probes = l.split_whitespace().next().and_then(|w| w.parse::<usize>().ok()).unwrap_or(0);
        let took =
            l.strip_suffix(" ms").and_then(|l| l.rsplit(' ').next()).and_then(|w| w.parse::<f64>().ok());
        (n + probes, ms + took.unwrap_or(0.0))
    })
}

/// One start and stop: (ms to attached, ms linking, ms to detached, probes).
pub(super) fn once(b: &Built, links: &str, libs: &[PathBuf]) -> anyhow::Result<(f64, f64, f64, usize)> {
    let mut c = Command::new(&b.agent);
    c.args(["run", "--uprobe-links", links, "--rescan", "0", "--output"]);
    c.arg(b.out.join("attach").join("events.jsonl"));
    c.arg("--socket").arg(b.out.join("attach").join("gpumem.sock"));
    for lib in libs {
        c.arg("--libcuda").arg(lib);
    }
    let (mut tracer, started) = Tracer::start(c, "gpumem: ready")?;
    let (probes, linking) = attached(tracer.seen());
    let mut child = tracer.0.take().context("the agent is not running")?;
    let stop = Instant::now();
    interrupt(child.id());
    let status = child.wait().context("waiting for the agent to stop")?;
    let stopped = stop.elapsed();
    anyhow::ensure!(status.success(), "the agent stopped with {status}");
    Ok((started.as_secs_f64() * 1000.0, linking, stopped.as_secs_f64() * 1000.0, probes))
}

/// Measures each case `reps` times; multi links only where the kernel
/// has them (None: why not).
pub fn measure(b: &Built, reps: usize) -> anyhow::Result<Section> {
    let multi = multi_refusal(b);
    let mut rows = Vec::new();
    for (links, count) in CASES {
        if links == "multi" && multi.is_some() {
            continue;
        }
        let libs = copies(b, count)?;
        let (mut attach, mut link, mut detach, mut probes) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for i in 0..reps {
            eprintln!(
                "xtask: bench: attach and detach, {links} links, {count} librar{}, {}/{reps}",
                plural(count),
                i + 1
            );
            let (a, l, d, p) = once(b, links, &libs)?;
            attach.push(a);
            link.push(l);
            detach.push(d);
            probes = p;
        }
        let (attach_ms, link_ms, detach_ms) = (median(attach), median(link), median(detach));
        rows.push(Row { links, libraries: count, probes, repetitions: reps, attach_ms, link_ms, detach_ms });
    }
    let _ = std::fs::remove_dir_all(b.out.join("attach"));
    Ok(Section { rows, multi_refusal: multi })
}

/// Why the kernel makes no multi-uprobe links, from `gpumem probe`.
pub(super) fn multi_refusal(b: &Built) -> Option<String> {
    let out = match Command::new(&b.agent).args(["probe", "--json"]).output() {
        Ok(out) => out,
        Err(e) => return Some(format!("gpumem probe did not run: {e}")),
    };
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let caps = v["capabilities"].as_array().cloned().unwrap_or_default();
    match caps.iter().find(|c| c["name"] == "uprobe_multi") {
        Some(c) if c["available"] == true => None,
        Some(c) => Some(c["reason"].as_str().unwrap_or("unavailable").to_string()),
        None => Some("gpumem probe reports no uprobe_multi capability".into()),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        "y"
    } else {
        "ies"
    }
}

impl Section {
    pub fn json(&self) -> Value {
        json!({ "rows": self.rows, "multi_refusal": self.multi_refusal })
    }

    pub fn markdown(&self) -> String {
        let f = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
        let mut md = "\nAttaching and detaching (start to `ready`, of it the links alone; SIGINT to exit), median:\n\n| links | libraries | probes | repetitions | start to ready (ms) | linking (ms) | detach (ms) |\n| --- | --- | --- | --- | --- | --- | --- |\n".to_string();
        for r in &self.rows {
            md += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.links,
                r.libraries,
                r.probes,
                r.repetitions,
                f(r.attach_ms),
                f(r.link_ms),
                f(r.detach_ms)
            );
        }
        if let Some(why) = &self.multi_refusal {
            md += &format!("\nMulti-uprobe links not measured: {why}\n");
        }
        md
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn probes_and_link_times_are_summed_over_the_start_up_lines() {
        let lines: Vec<String> = [
            "gpumem: attached 40 probe(s) (35 with a return probe) to /a/libcuda.so.1 (dev 1, inode 2) in 12 ms",
            "gpumem: warning: NVML is not available",
            "gpumem: attached 38 probe(s) (33 with a return probe) to /b/lib cuda.so.1 (dev 1, inode 3) in 9 ms",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(super::attached(&lines), (78, 21.0));
        assert_eq!(super::attached(&[]), (0, 0.0));
    }
}
