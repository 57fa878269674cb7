//! `cargo xtask test`: unit tests, then the privileged end-to-end tests as
//! root with one test thread, then one summary line.
use std::{
    io::{BufRead, BufReader},
    process::Stdio,
};

use anyhow::Context;

use crate::{
    artifacts::build,
    util::{cmd, host_crate_args, is_root, root},
};

/// Totals over every libtest run.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    pub skipped: u64,
    pub runs: u64,
}

impl Tally {
    /// Counts one line of libtest output.
    pub fn line(&mut self, line: &str) {
        // libtest prints `test NAME ... ` before the test runs, so a skip
        // notice lands on that line.
        if line.starts_with("SKIPPED ") || line.contains(" ... SKIPPED ") {
            self.skipped += 1;
        }
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        self.runs += 1;
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// Runs `cargo test ARGS`, echoing its output and counting results; Ok(true)
/// when cargo succeeded.
fn cargo_test(args: &[&str], envs: &[(&str, &std::ffi::OsStr)], tally: &mut Tally) -> anyhow::Result<bool> {
    let mut c = cmd("cargo");
    c.current_dir(root()).arg("test").args(args).stdout(Stdio::piped());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().context("starting cargo test")?;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line?;
        println!("{line}");
        tally.line(&line);
    }
    Ok(child.wait()?.success())
}

pub fn test() -> anyhow::Result<()> {
    println!("== lint");
    crate::lint::lint()?;
    let built = build()?;
    let mut tally = Tally::default();
    println!("== unit tests");
    let mut unit_args = host_crate_args();
    unit_args.extend(["--lib", "--bins"]);
    let unit_ok = cargo_test(&unit_args, &[], &mut tally)?;
    println!("== privileged end-to-end tests (one thread)");
    if !is_root() {
        println!("xtask: not root: the privileged tests will print SKIPPED; run `sudo cargo xtask test` to run them");
    }
    let python = built.setup.python.clone().into_os_string();
    let e2e_ok = cargo_test(
        &["-p", "gpumem-tests", "--test", "e2e", "--", "--test-threads=1"],
        &[("GPUMEM_PYTHON", &python)],
        &mut tally,
    )?;
    let vm_ok = if is_root() {
        println!("== the kernel matrix under QEMU");
        let results = crate::vm::matrix(&built, &[])?;
        report_matrix(&results, &mut tally)
    } else {
        println!("SKIPPED the kernel matrix: booting kernels and loading eBPF in them needs root");
        tally.skipped += 1;
        true
    };
    let skipped = if tally.skipped > 0 { format!(", {} skipped", tally.skipped) } else { String::new() };
    println!("{} passed, {} failed{skipped}", tally.passed, tally.failed);
    if !unit_ok || !e2e_ok || !vm_ok || tally.failed > 0 {
        anyhow::bail!("tests failed");
    }
    if tally.runs == 0 {
        anyhow::bail!("no test ran");
    }
    Ok(())
}

/// Prints one line per kernel and adds the matrix's counts to `tally`;
/// true when every kernel finished with no failure.
fn report_matrix(results: &[crate::vm::KernelResult], tally: &mut Tally) -> bool {
    println!("== kernel matrix");
    for r in results {
        println!("{}", r.summary());
        tally.passed += r.tally.passed;
        tally.failed += r.tally.failed;
    }
    results.iter().all(|r| r.ok())
}

/// `cargo xtask vm`: the matrix alone.
pub fn vm_only(only: &[String]) -> anyhow::Result<()> {
    if !is_root() {
        anyhow::bail!(
            "the kernel matrix loads eBPF inside the VMs as root and installs QEMU: run it as root"
        );
    }
    let built = build()?;
    let mut tally = Tally::default();
    let results = crate::vm::matrix(&built, only)?;
    let ok = report_matrix(&results, &mut tally);
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if !ok {
        anyhow::bail!("the kernel matrix failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_libtest_summaries_and_skips() {
        let mut t = Tally::default();
        t.line(
            "test result: ok. 22 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s",
        );
        t.line(
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s",
        );
        t.line("SKIPPED some_test: needs root");
        t.line("test other_test ... SKIPPED other_test: needs a kernel that allows it");
        t.line("test foo ... ok");
        assert_eq!(t, Tally { passed: 25, failed: 2, ignored: 1, skipped: 2, runs: 2 });
    }
}
