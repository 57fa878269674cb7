//! The bench's section on NVIDIA's entry points. NVIDIA's stubs begin with
//! an instruction the kernel single-steps; the agent probes past it (see
//! gpumem-user/src/bpf/site). Here every configuration runs on NVIDIA's own
//! 550 library beside a reference library whose entry points the kernel
//! emulates at offset 0 (the simulated driver built with its
//! `reference-entries` feature), both without a device: each alloc+free
//! pair is refused by the driver, so the programs take the same path on
//! both and only the entry points differ. A second loop calls
//! cuCtxSetCurrent, what a framework may call once per operation.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::Context;
use serde_json::{json, Value};

use super::{
    setup::{bpftrace_script, median, time_loop, Built, CONFIGS},
    tracer::{tracer_command, Tracer},
};
use crate::util::{cmd, root, run, target_dir};

/// The libraries compared, as the report names them.
pub const LIBRARIES: [&str; 2] = ["reference", "nvidia-550"];
/// The loops run on each, with the workload's arguments.
const LOOPS: [(&str, &[&str]); 3] =
    [("alloc_free", &[]), ("ctx_set_current", &["--ctx"]), ("pool_async", &["--pool", "async"])];

/// Each (library, configuration, loop)'s time per iteration, one sample per
/// repetition.
pub type Samples = BTreeMap<(&'static str, &'static str, &'static str), Vec<f64>>;

/// The section's libraries and its samples.
pub struct Section {
    /// The NVIDIA driver's version.
    pub version: String,
    pub samples: Samples,
}

/// The reference library, built from the simulated driver with
/// `reference-entries` (in a target directory of its own, so the bench's
/// stub-shaped build is not rebuilt each time).
fn reference_library(out: &Path) -> anyhow::Result<PathBuf> {
    let target = target_dir().join("reference");
    run(cmd("cargo")
        .current_dir(root())
        .args(["build", "--release", "-p", "simcuda"])
        .args(["--features", "reference-entries", "--target-dir"])
        .arg(&target))
    .context("building the reference library (simcuda with reference-entries)")?;
    let dir = out.join("reference");
    std::fs::create_dir_all(&dir)?;
    let lib = dir.join("libcuda.so.1");
    std::fs::copy(target.join("release/libsimcuda.so"), &lib)?;
    Ok(lib)
}

/// NVIDIA's 550 libcuda (fetched where missing).
pub fn library_550() -> anyhow::Result<crate::nvidia::Library> {
    crate::nvidia::libraries()?
        .into_iter()
        .find(|l| l.version.starts_with("550."))
        .context("NVIDIA's 550 library was not fetched")
}

/// Runs the section: `reps` interleaved repetitions of every library,
/// configuration and loop, `iterations` per loop.
pub fn measure(
    b: &Built,
    reps: usize,
    iterations: usize,
    bpftrace: &Result<PathBuf, String>,
) -> anyhow::Result<Section> {
    let reference = reference_library(&b.out)?;
    let nvidia = library_550()?;
    let libraries = [(LIBRARIES[0], reference), (LIBRARIES[1], nvidia.path.clone())];
    let mut samples = Samples::new();
    for rep in 0..reps {
        eprintln!("xtask: bench: NVIDIA's entry points, repetition {}/{reps}", rep + 1);
        for (name, lib) in &libraries {
            let script = b.out.join(format!("{name}.bt"));
            std::fs::write(&script, bpftrace_script(lib))?;
            for config in CONFIGS {
                let Ok(command) = tracer_command(config, b, lib, &script, bpftrace) else { continue };
                let _tracer = command.map(|(c, ready)| Tracer::start(c, ready)).transpose()?;
                for (l, extra) in LOOPS {
                    if config == "bpftrace" && l != "alloc_free" {
                        continue; // the script probes cuMemAlloc_v2 and cuMemFree_v2 only
                    }
                    let args = [&["--no-device"][..], extra].concat();
                    let ns = time_loop(&b.workload, lib, &args, iterations)?;
                    samples.entry((name, config, l)).or_default().push(ns);
                }
            }
        }
    }
    Ok(Section { version: nvidia.version, samples })
}

impl Section {
    fn med(&self, lib: &'static str, config: &'static str, l: &'static str) -> Option<f64> {
        self.samples.get(&(lib, config, l)).and_then(|v| median(v.clone()))
    }

    /// What `config` adds to an iteration of loop `l` on `lib`, in each
    /// repetition: its time less the untraced time of the same repetition.
    fn costs(&self, lib: &'static str, config: &'static str, l: &'static str) -> Option<Vec<f64>> {
        let traced = self.samples.get(&(lib, config, l))?;
        let untraced = self.samples.get(&(lib, "untraced", l))?;
        Some(traced.iter().zip(untraced).map(|(t, u)| t - u).collect())
    }

    /// The median over the repetitions of `config`'s cost on NVIDIA's
    /// library over its cost on the reference library in the same
    /// repetition.
    pub fn cost_ratio(&self, config: &'static str, l: &'static str) -> Option<f64> {
        let (n, r) = (self.costs(LIBRARIES[1], config, l)?, self.costs(LIBRARIES[0], config, l)?);
        median(n.iter().zip(&r).filter(|(_, &r)| r > 0.0).map(|(n, r)| n / r).collect())
    }

    pub fn json(&self) -> Value {
        let mut ns = serde_json::Map::new();
        let mut ratios = serde_json::Map::new();
        for (l, _) in LOOPS {
            for lib in LIBRARIES {
                let row: serde_json::Map<String, Value> =
                    CONFIGS.iter().map(|&c| (c.to_string(), json!(self.med(lib, c, l)))).collect();
                ns.insert(format!("{lib}/{l}"), row.into());
            }
            let row: serde_json::Map<String, Value> =
                CONFIGS[1..].iter().map(|&c| (c.to_string(), json!(self.cost_ratio(c, l)))).collect();
            ratios.insert(l.to_string(), row.into());
        }
        json!({ "nvidia_version": self.version, "ns_per_iteration": ns, "cost_ratio_nvidia_vs_reference": ratios })
    }

    pub fn markdown(&self) -> String {
        let f = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
        let r = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}"));
        let mut md = format!(
            "\nOn NVIDIA's own entry points (libcuda {}, no device: every call refused, through the same stubs), beside a reference library whose entry points the kernel emulates; ns per iteration, median:\n\n| library / loop | {} |\n| --- |{}\n",
            self.version,
            CONFIGS.join(" | "),
            " --- |".repeat(CONFIGS.len())
        );
        for (l, _) in LOOPS {
            for lib in LIBRARIES {
                let cells: Vec<String> = CONFIGS.iter().map(|c| f(self.med(lib, c, l))).collect();
                md += &format!("| {lib} / {l} | {} |\n", cells.join(" | "));
            }
        }
        md += "\nWhat each tracer adds on NVIDIA's entry points over what it adds on the reference library (traced less untraced, median of each repetition's ratio):\n\n| loop | ";
        md += &format!("{} |\n| --- |{}\n", CONFIGS[1..].join(" | "), " --- |".repeat(CONFIGS.len() - 1));
        for (l, _) in LOOPS {
            let cells: Vec<String> = CONFIGS[1..].iter().map(|c| r(self.cost_ratio(c, l))).collect();
            md += &format!("| {l} | {} |\n", cells.join(" | "));
        }
        md
    }
}
