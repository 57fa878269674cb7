//! `cargo xtask fuzz`: coverage-guided fuzzing (cargo-fuzz, libFuzzer,
//! the address sanitizer) of every parser that takes input from outside
//! the agent, the targets in fuzz/fuzz_targets. Each runs for the time
//! given over its corpus: the seeds kept in fuzz/corpus/TARGET (read only)
//! and what earlier runs found, kept in target/fuzz/corpus/TARGET. A crash
//! fails the run and is kept in target/fuzz/artifacts/TARGET/ with the
//! command that replays it; it becomes a regression test where its parser
//! is tested. `--save` merges what was found into the kept seeds
//! (libFuzzer's `-merge=1`: only inputs that add coverage).
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context};

use crate::util::{cargo_bin, cmd, output, root, run, target_dir};

/// The targets, as fuzz/Cargo.toml names them.
pub const TARGETS: [&str; 8] =
    ["record", "control", "limits_file", "limit_args", "declared", "proc_text", "kubelet_names", "x86_sites"];

/// The cargo-fuzz release that builds the targets.
const CARGO_FUZZ: &str = "0.13.2";

/// What one target's run did.
pub struct Run {
    pub target: &'static str,
    /// Inputs run (libFuzzer's `stat::number_of_executed_units`).
    pub execs: u64,
    /// Coverage at the end: edges (`cov`) and features (`ft`).
    pub cov: u64,
    pub features: u64,
    /// Inputs in the corpus at the end.
    pub corpus: u64,
}

/// Builds the targets and runs each of `only` (all when empty) for
/// `seconds`; a table of what each did. Fails at the first crash.
pub fn fuzz(seconds: u32, only: &[String], save: bool) -> anyhow::Result<Vec<Run>> {
    for t in only {
        if !TARGETS.contains(&t.as_str()) {
            bail!("no fuzz target `{t}`: the targets are {}", TARGETS.join(", "));
        }
    }
    prepare()?;
    let bins = build(None)?;
    let targets = TARGETS.into_iter().filter(|t| only.is_empty() || only.iter().any(|o| o == t));
    run_all(&bins, targets, seconds, save, |line| println!("{line}"))
}

/// Runs each of `targets` for `seconds` (merging what it found into the
/// seeds if `save`), saying each run's line to `say`; stops at the first
/// failure.
fn run_all(
    bins: &Path,
    targets: impl Iterator<Item = &'static str>,
    seconds: u32,
    save: bool,
    mut say: impl FnMut(String),
) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for target in targets {
        let r = run_one(bins, target, seconds)?;
        say(r.line(seconds));
        if save {
            merge(bins, target)?;
        }
        runs.push(r);
    }
    Ok(runs)
}

/// What fuzzing beside other work gives back: each target's run and the
/// lines [`fuzz`] would have printed, or the first failure.
pub type Beside = std::thread::JoinHandle<anyhow::Result<(Vec<Run>, Vec<String>)>>;

/// Every target for `seconds`, as [`fuzz`] runs them, on a thread of its
/// own beside other work (`cargo xtask test`): what this machine lacks for
/// it is installed first, here, saying so; then the thread builds the
/// targets at the lowest priority (`nice -n 19`: the work beside it keeps
/// the CPU it wants), its build's output kept in target/fuzz/build.log,
/// and runs each target. Nothing is printed meanwhile.
pub fn beside(seconds: u32) -> anyhow::Result<Beside> {
    prepare()?;
    let log = target_dir().join("fuzz/build.log");
    Ok(std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let bins = build(Some(&log))?;
        let mut lines = vec![format!(
            "xtask: fuzz targets built in {} s at the lowest priority (nice 19) beside the tests; the build's output is in {}",
            started.elapsed().as_secs(),
            log.display()
        )];
        let runs = run_all(&bins, TARGETS.into_iter(), seconds, false, |line| lines.push(line))?;
        Ok((runs, lines))
    }))
}

/// The nightly toolchain and cargo-fuzz, installed where missing.
fn prepare() -> anyhow::Result<()> {
    crate::setup::nightly_sysroot()?;
    ensure_cargo_fuzz()
}

/// cargo-fuzz, installed with cargo if missing.
fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    let installed = output(cmd("cargo").args(["fuzz", "--version"]));
    if installed.is_ok_and(|v| v.contains(CARGO_FUZZ)) {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ} (cargo install) into {}", cargo_bin().display());
    run(cmd("cargo").args(["install", "--locked", "cargo-fuzz", "--version", CARGO_FUZZ]))
        .context("installing cargo-fuzz")
}

/// Builds every target (nightly, address sanitizer, the agent without
/// its eBPF object): the directory of the binaries. Given `niced`, the
/// build runs under `nice -n 19` with its output in that file.
fn build(niced: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = root().join("fuzz");
    let mut c = match niced {
        Some(_) => {
            let mut c = cmd("nice");
            c.args(["-n", "19", "rustup"]);
            c
        }
        None => cmd("rustup"),
    };
    c.args(["run", "nightly", "cargo", "fuzz", "build", "--fuzz-dir"])
        .arg(&dir)
        .current_dir(root())
        .env("AYA_BUILD_SKIP", "1");
    match niced {
        None => run(&mut c).context("building the fuzz targets")?,
        Some(log) => {
            fs::create_dir_all(log.parent().expect("the log is in a directory"))?;
            let file = fs::File::create(log).with_context(|| format!("making {}", log.display()))?;
            c.stdin(std::process::Stdio::null()).stdout(file.try_clone()?).stderr(file);
            run(&mut c)
                .with_context(|| format!("building the fuzz targets: its output is in {}", log.display()))?
        }
    }
    Ok(dir.join("target/x86_64-unknown-linux-gnu/release"))
}

fn run_one(bins: &Path, target: &'static str, seconds: u32) -> anyhow::Result<Run> {
    let found = target_dir().join("fuzz/corpus").join(target);
    let seeds = root().join("fuzz/corpus").join(target);
    let artifacts = target_dir().join("fuzz/artifacts").join(target);
    for d in [&found, &seeds, &artifacts] {
        fs::create_dir_all(d).with_context(|| format!("making {}", d.display()))?;
    }
    let bin = bins.join(target);
    let out = Command::new(&bin)
        .arg(&found)
        .arg(&seeds)
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let log_file = target_dir().join("fuzz").join(format!("{target}.log"));
    fs::write(&log_file, &log)?;
    if !out.status.success() {
        let crash = log.lines().find_map(|l| l.split_once("Test unit written to ")).map(|(_, p)| p.trim());
        bail!(
            "fuzz target {target} failed ({}): {}\nreplay it with `{} {}`; the whole log is {}",
            out.status,
            log.lines()
                .rev()
                .find(|l| l.contains("panicked") || l.contains("ERROR"))
                .unwrap_or("see the log"),
            bin.display(),
            crash.unwrap_or("<the input>"),
            log_file.display()
        );
    }
    Ok(parse_run(target, &log))
}

impl Run {
    /// The line said of it, after a run of `seconds`.
    fn line(&self, seconds: u32) -> String {
        format!(
            "fuzz {:<14} {:>10} inputs in {seconds} s, coverage {} edges / {} features, corpus {}",
            self.target, self.execs, self.cov, self.features, self.corpus
        )
    }
}

/// Merges the inputs found into the kept seeds: only those that add
/// coverage.
fn merge(bins: &Path, target: &str) -> anyhow::Result<()> {
    let seeds = root().join("fuzz/corpus").join(target);
    let found = target_dir().join("fuzz/corpus").join(target);
    let out = Command::new(bins.join(target)).arg("-merge=1").arg(&seeds).arg(&found).output()?;
    if !out.status.success() {
        bail!("merging {target}'s corpus: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A run's figures from libFuzzer's log: the last status line (`#N DONE
/// cov: C ft: F corp: K/...`) and the final stats.
pub fn parse_run(target: &'static str, log: &str) -> Run {
    let after = |line: &str, key: &str| -> Option<u64> {
        let at = line.find(key)? + key.len();
        line[at..].trim_start().split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let status = log.lines().rev().find(|l| l.starts_with('#') && l.contains("cov: ")).unwrap_or("");
    let execs = log.lines().find_map(|l| after(l, "stat::number_of_executed_units:"));
    Run {
        target,
        execs: execs.unwrap_or(0),
        cov: after(status, "cov:").unwrap_or(0),
        features: after(status, "ft:").unwrap_or(0),
        corpus: after(status, "corp:").unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_figures_are_read_from_its_log() {
        let log = "INFO: Seed: 1\n#2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
                   #2053208\tDONE   cov: 308 ft: 535 corp: 170/9845b lim: 4096 exec/s: 228134 rss: 41Mb\n\
                   Done 2053208 runs in 9 second(s)\nstat::number_of_executed_units: 2053208\n\
                   stat::peak_rss_mb:              41\n";
        let r = parse_run("record", log);
        assert_eq!((r.execs, r.cov, r.features, r.corpus), (2053208, 308, 535, 170));
    }
}
