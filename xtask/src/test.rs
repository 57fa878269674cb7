//! `cargo xtask test`: unit tests, the deployment files' checks, then the
//! privileged end-to-end tests as root with one test thread, and beside
//! them the fuzz targets and the kernel matrix, then one summary line.
use std::{
    io::{BufRead, BufReader},
    process::Stdio,
};

use anyhow::Context;

use crate::{
    artifacts::build_profile,
    tally::Tally,
    util::{cmd, host_crate_args, is_root, root, target_dir},
    vm::PROFILE,
};

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
    let mut took = Phases::default();
    println!("== lint");
    crate::lint::lint()?;
    took.ended("lint");
    // The matrix runs as root only. Its lanes are read before anything is
    // built (a bad GPUMEM_VM_LANES is refused at once).
    let lanes = is_root().then(crate::vm::lanes).transpose()?;
    // Everything is built once, in the matrix's profile (optimised, debug
    // assertions and overflow checks kept): the host's tests and the
    // guests' run the same binaries. The upgrade test's noted agent comes
    // first (root only): built after, it would leave the noted agent's
    // crate to be compiled once more for the plain one.
    let noted = is_root().then(|| crate::image::noted_agent(PROFILE)).transpose()?;
    let built = build_profile(PROFILE)?;
    took.ended("build");
    let mut tally = Tally::default();
    println!("== unit tests");
    let mut unit_args = host_crate_args();
    unit_args.extend(["--lib", "--bins", "--profile", PROFILE]);
    let unit_ok = cargo_test(&unit_args, &[], &mut tally)?;
    took.ended("unit tests");
    println!("== deployment files (deploy/): systemd-analyze, Kubernetes schemas");
    let deploy_ok = crate::deploy::check_all(Some(&built.agent), &mut tally);
    took.ended("deployment files");
    let fuzz = fuzz_beside(&mut tally);
    let e2e = end_to_end(&built, noted.as_deref(), lanes, &mut tally, &mut took);
    // Joined even when the set-up failed: its build is not left running.
    let fuzz_ok = fuzz.is_some_and(|f| fuzz_joined(f, &mut tally));
    took.ended("the fuzz targets, after the host's suite");
    let (e2e_ok, matrix) = e2e?;
    let vm_ok = match matrix {
        Some(matrix) => {
            let results = matrix.join().expect("the kernel matrix's thread panicked")?;
            took.ended("the kernel matrix, after the host's suite");
            println!("== the kernel matrix under QEMU (beside the host's suite)");
            for r in &results {
                r.console.iter().for_each(|l| println!("{l}"));
                if !r.ok() {
                    println!("{}", r.where_console());
                }
            }
            report_matrix(&results, &mut tally)
        }
        None => {
            println!("SKIPPED the kernel matrix: booting kernels and loading eBPF in them needs root");
            tally.skipped += 1;
            true
        }
    };
    took.say();
    let skipped = if tally.skipped > 0 { format!(", {} skipped", tally.skipped) } else { String::new() };
    println!("{} passed, {} failed{skipped}", tally.passed, tally.failed);
    if !unit_ok || !deploy_ok || !fuzz_ok || !e2e_ok || !vm_ok || tally.failed > 0 {
        anyhow::bail!("tests failed");
    }
    if tally.runs == 0 {
        anyhow::bail!("no test ran");
    }
    Ok(())
}

/// The kernel matrix, running on a thread of its own.
type Matrix = std::thread::JoinHandle<anyhow::Result<Vec<crate::vm::KernelResult>>>;

/// The privileged end-to-end suite on the host, one test at a time, with
/// what it needs set up first (the images assembled from `built`'s agent
/// and the `noted` one), and beside it the kernel matrix (its `lanes`;
/// None where it cannot run): whether cargo succeeded, and the matrix's
/// thread, to join.
///
/// The host's suite keeps about a sixth of this machine's CPU busy (it
/// waits on the agent, its drains and its workloads' pacing), and the
/// matrix's guests are CPU-bound: side by side, the matrix takes what the
/// suite leaves. Both are prepared first (every fetch and build), so
/// nothing but the tests and the guests runs meanwhile.
fn end_to_end(
    built: &crate::artifacts::Built,
    noted: Option<&std::path::Path>,
    lanes: Option<usize>,
    tally: &mut Tally,
    took: &mut Phases,
) -> anyhow::Result<(bool, Option<Matrix>)> {
    println!("== privileged end-to-end tests (one thread)");
    if !is_root() {
        println!("xtask: not root: the privileged tests will print SKIPPED; run `sudo cargo xtask test` to run them");
    }
    let python = built.setup.python.clone().into_os_string();
    let nvidia = crate::nvidia::libraries()?;
    let versions: Vec<&str> = nvidia.iter().map(|l| l.version.as_str()).collect();
    println!("xtask: NVIDIA's driver libraries for the tests: {}", versions.join(", "));
    let nvidia = crate::nvidia::path_list(&nvidia);
    let prometheus = crate::prometheus::server()?.into_os_string();
    let podman = container_runtime()?.into_os_string();
    let [image_archive, image_tag, next_archive] = agent_images(&built.agent, noted)?;
    let tmux = crate::util::ensure_tool("tmux", "tmux")?.into_os_string();
    // Compiled now, so that the compile does not take the guests' CPU.
    crate::util::run(cmd("cargo").current_dir(root()).args([
        "test",
        "-p",
        "gpumem-tests",
        "--test",
        "e2e",
        "--no-run",
        "--profile",
        PROFILE,
    ]))
    .context("building the end-to-end test binary")?;
    took.ended("the e2e suite's set-up (drivers, Prometheus, podman, images, the test binary)");
    let matrix = match lanes {
        Some(lanes) => {
            let prepared = crate::vm::prepare(built, &[], &crate::vm::Selection::default())?;
            took.ended("the kernel matrix's set-up (kernels, initramfs)");
            println!("== the kernel matrix under QEMU, beside the host's suite (its lines come after it)");
            Some(std::thread::spawn(move || prepared.run(lanes, false)))
        }
        None => None,
    };
    // An error here still waits for the matrix below: its guests are not
    // left running.
    let ok = cargo_test(
        &["-p", "gpumem-tests", "--test", "e2e", "--profile", PROFILE, "--", "--test-threads=1"],
        &[
            ("GPUMEM_BUILD_PROFILE", std::ffi::OsStr::new(PROFILE)),
            ("GPUMEM_PYTHON", &python),
            ("GPUMEM_NVIDIA_LIBCUDA", &nvidia),
            ("GPUMEM_PROMETHEUS", &prometheus),
            ("GPUMEM_PODMAN", &podman),
            ("GPUMEM_IMAGE", &image_archive),
            ("GPUMEM_IMAGE_TAG", &image_tag),
            ("GPUMEM_IMAGE_NEXT", &next_archive),
            ("GPUMEM_TMUX", &tmux),
        ],
        tally,
    )
    .unwrap_or_else(|e| {
        println!("FAILED the privileged end-to-end tests: {e:#}");
        false
    });
    took.ended("privileged end-to-end tests (the kernel matrix beside them)");
    Ok((ok, matrix))
}

/// How long each phase of the run took, said at its end (CI's whole run
/// should stay under 45 minutes: this says where the time went).
struct Phases {
    since: std::time::Instant,
    took: Vec<(&'static str, std::time::Duration)>,
}

impl Default for Phases {
    fn default() -> Self {
        Self { since: std::time::Instant::now(), took: Vec::new() }
    }
}

impl Phases {
    /// The phase `name` ended now.
    fn ended(&mut self, name: &'static str) {
        let now = std::time::Instant::now();
        self.took.push((name, now - self.since));
        self.since = now;
    }

    fn say(&self) {
        let total: std::time::Duration = self.took.iter().map(|(_, d)| *d).sum();
        let each: Vec<String> = self.took.iter().map(|(n, d)| format!("{n} {} s", d.as_secs())).collect();
        println!("xtask: {} s in all: {}", total.as_secs(), each.join(", "));
    }
}

/// Every fuzz target for a few seconds (`GPUMEM_FUZZ_SECONDS`, 10 by
/// default), built and run on a thread of its own beside the tests, the
/// build at the lowest priority ([`crate::fuzz::beside`]): the build
/// needs about 700 core-seconds, and the host's suite and the matrix's
/// guests leave about that much idle. None (a failure counted) where what
/// it needs could not be installed.
fn fuzz_beside(tally: &mut Tally) -> Option<crate::fuzz::Beside> {
    let seconds = std::env::var("GPUMEM_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    println!("== fuzz targets, {seconds} s each (cargo xtask fuzz), beside the tests: their lines come after the host's suite");
    crate::fuzz::beside(seconds)
        .inspect_err(|e| {
            println!("FAILED fuzzing: {e:#}");
            tally.failed += 1;
        })
        .ok()
}

/// Waits for the fuzz targets' thread and prints what it said, each
/// target a test in the tally: a crash fails it, saying how to replay it.
fn fuzz_joined(fuzz: crate::fuzz::Beside, tally: &mut Tally) -> bool {
    println!("== fuzz targets (beside the tests)");
    match fuzz.join().expect("the fuzz targets' thread panicked") {
        Ok((runs, lines)) => {
            lines.iter().for_each(|l| println!("{l}"));
            tally.passed += runs.len() as u64;
            true
        }
        Err(e) => {
            println!("FAILED fuzzing: {e:#}");
            tally.failed += 1;
            false
        }
    }
}

/// podman and the runtime it needs here (runc: Debian's crun refuses
/// hybrid cgroups), from Debian's packages when missing, for the
/// container test.
/// The agent's own image, run as the DaemonSet runs it (the `daemonset`
/// suites): its archive and its name, and the archive of the image of
/// another build an upgrade replaces it with (`noted`, see
/// [`crate::image::noted_agent`]); assembled as root, as the privileged
/// tests run (empty otherwise: they skip).
fn agent_images(
    agent: &std::path::Path,
    noted: Option<&std::path::Path>,
) -> anyhow::Result<[std::ffi::OsString; 3]> {
    let Some(noted) = noted else {
        return Ok(Default::default());
    };
    let (image, next) = crate::image::pair(agent, noted)?;
    Ok([image.archive.into_os_string(), image.tag.into(), next.archive.into_os_string()])
}

pub fn container_runtime() -> anyhow::Result<std::path::PathBuf> {
    crate::util::ensure_tool("runc", "runc")?;
    crate::util::ensure_tool("podman", "podman")
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

/// `cargo xtask deploy-check`: the deployment files alone: their unit
/// tests (gpumem-tests' `deploy` module, against the agent's own parsers),
/// then the checks with outside tools. Uses the built agent if there is one;
/// builds nothing but the tests.
pub fn deploy_only() -> anyhow::Result<()> {
    let mut tally = Tally::default();
    println!("== deployment files: unit tests against the agent's parsers");
    let unit_ok = cargo_test(&["-p", "gpumem-tests", "--lib", "--", "deploy::"], &[], &mut tally)?;
    println!("== deployment files: systemd-analyze, Kubernetes schemas");
    let agent = target_dir().join("debug/gpumem");
    let deploy_ok = crate::deploy::check_all(Some(&agent), &mut tally);
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if !unit_ok || !deploy_ok || tally.failed > 0 {
        anyhow::bail!("the deployment files' checks failed: see the FAILED lines and their reasons above");
    }
    Ok(())
}

/// `cargo xtask vm`: the matrix alone.
pub fn vm_only(only: &[String], selection: &crate::vm::Selection) -> anyhow::Result<()> {
    if !is_root() {
        anyhow::bail!(
            "the kernel matrix loads eBPF inside the VMs as root and installs QEMU: run it as root"
        );
    }
    let lanes = crate::vm::lanes()?;
    let built = build_profile(crate::vm::PROFILE)?;
    let mut tally = Tally::default();
    let results = crate::vm::matrix(&built, only, selection, lanes)?;
    let ok = report_matrix(&results, &mut tally);
    println!("{} passed, {} failed", tally.passed, tally.failed);
    if !ok {
        anyhow::bail!("the kernel matrix failed");
    }
    Ok(())
}
