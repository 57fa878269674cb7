//! The kernel matrix: the privileged end-to-end suites run inside QEMU on
//! stock Debian kernels (`kernels`), from an initramfs holding the agent,
//! the simulated driver, the workloads, the test binaries (`initramfs`)
//! and Python with the real clients (`python`), results read back from the
//! serial console (`qemu`).
mod initramfs;
mod kernels;
mod lanes;
mod python;
mod qemu;

pub use lanes::lanes;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{bail, Context};

use crate::{
    artifacts::Built,
    tally::Tally,
    util::{cmd, ensure_tool, root, target_dir},
};

/// The suites (modules of the end-to-end test binary) that run on every
/// kernel: limits (signal, audit, deny or its refusal, races), limits
/// declared in the environment (read at exec, the first allocation bound
/// every time; a container's), rules on Kubernetes pods (a new pod's first
/// process held at exec until its rule is made), exact tracing, threads
/// and processes allocating at random (no run skipped), multi-uprobe links
/// or their fallback, and what a limited process is told the card has
/// (view=limit, where stock kernels let programs write user memory).
pub const SUITES: &[&str] =
    &["concurrency", "declared", "limits", "links", "persist", "pod_rules", "trace_exact", "view"];

/// What runs in each kernel: the matrix's suites once (the default), or
/// the tests named, `repeat` times.
pub struct Selection {
    /// Filters on the end-to-end tests' names; empty: [`SUITES`], less the
    /// known failures.
    pub tests: Vec<String>,
    pub repeat: u32,
}

impl Default for Selection {
    fn default() -> Self {
        Self { tests: Vec::new(), repeat: 1 }
    }
}

impl Selection {
    /// The guest's files: the filters, one a line, and the known failures
    /// to skip (none when tests are named: to reproduce them).
    fn files(&self) -> (String, String) {
        if !self.tests.is_empty() {
            return (self.tests.iter().map(|t| format!("{t}\n")).collect(), String::new());
        }
        let skips = kernels::KNOWN_FAILURES
            .iter()
            .map(|(prefix, test, why)| format!("{prefix} {test} {why}\n"))
            .collect();
        (SUITES.iter().map(|s| format!("{s}::\n")).collect(), skips)
    }
}

/// The end-to-end test binary's name (`tests/tests/e2e`).
const E2E: &str = "e2e";

/// The Cargo profile of what runs in the guests (the root Cargo.toml's
/// `[profile.matrix]`: optimised, with debug assertions and overflow
/// checks). Under emulation a debug agent reads about 2,600 records a
/// second with a whole vCPU, so a test's backlog, not the kernel, set the
/// matrix's pace; the host's suite runs the debug build.
pub const PROFILE: &str = "matrix";

/// How long one kernel's boot and suites may take. With debug builds
/// 6.1 took 594 to 1,005 s in clean-clone CI runs (a 2-core VM whose speed
/// moves by half between hours); with the matrix profile 526 s alone,
/// 686 s beside 6.12, 1,076 s in CI beside another guest and the host's
/// suite. `cargo xtask test` also builds the fuzz targets beside the
/// guests (at a lower priority): 40 minutes keeps a slow hour from
/// failing the matrix, within CI's 90.
const PER_KERNEL: Duration = Duration::from_secs(40 * 60);

/// One kernel's outcome.
pub struct KernelResult {
    pub series: &'static str,
    pub release: String,
    pub tally: Tally,
    pub finished: bool,
    pub timed_out: bool,
    pub wall: Duration,
    pub register_writes: Option<bool>,
    /// Whether `gpumem probe` found user memory writes (view=limit).
    pub user_writes: Option<bool>,
    /// The guest's lines, where they were not echoed as they came.
    pub console: Vec<String>,
    /// Where the whole console is kept.
    pub log: PathBuf,
}

impl KernelResult {
    /// Where to read the whole console (said of a kernel that failed).
    pub fn where_console(&self) -> String {
        format!("[{}] the whole console is in {}", self.series, self.log.display())
    }

    pub fn ok(&self) -> bool {
        self.finished && self.tally.failed == 0 && self.tally.passed > 0
    }

    /// The one summary line per kernel.
    pub fn summary(&self) -> String {
        let state = if self.timed_out {
            "TIMED OUT".to_string()
        } else if !self.finished {
            "DID NOT FINISH".to_string()
        } else if self.ok() {
            "ok".to_string()
        } else {
            "FAILED".to_string()
        };
        let writes = match self.register_writes {
            Some(true) => "deny by register write",
            Some(false) => "deny refused (no register writes)",
            None => "capabilities unknown",
        };
        let view = match self.user_writes {
            Some(true) => "view=limit",
            Some(false) => "view=limit refused",
            None => "view unknown",
        };
        format!(
            "kernel {:<7} {:<28} {}: {} passed, {} failed, {writes}, {view}, {:.0} s",
            self.series,
            self.release,
            state,
            self.tally.passed,
            self.tally.failed,
            self.wall.as_secs_f64()
        )
    }
}

/// Builds the end-to-end test binary, returning its path.
fn test_binary() -> anyhow::Result<PathBuf> {
    let mut c = cmd("cargo");
    c.current_dir(root()).args([
        "test",
        "-p",
        "gpumem-tests",
        "--no-run",
        "--message-format=json",
        "--test",
        E2E,
    ]);
    c.args(crate::artifacts::profile_args(PROFILE));
    let out = c.stderr(Stdio::inherit()).output().context("building the test binary")?;
    if !out.status.success() {
        bail!("building the end-to-end test binary failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|v| v["target"]["name"] == E2E && v["executable"].is_string())
        .and_then(|v| v["executable"].as_str().map(PathBuf::from))
        .with_context(|| format!("cargo reported no executable for the test binary `{E2E}`"))
}

/// What the initramfs holds (host path, path in the guest): busybox, the
/// agent, the workload, the simulated driver and NVML, the tests, and
/// NVIDIA's newest driver library (`deny` is proven on it where the kernel
/// allows register writes; `/init` names it in `GPUMEM_NVIDIA_LIBCUDA`).
fn guest_files(built: &Built, busybox: PathBuf) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let g = initramfs::GUEST_TARGET;
    let nvidia = crate::nvidia::libraries()?.pop().context("no NVIDIA driver library was fetched")?;
    Ok(vec![
        (busybox, "bin/busybox".to_string()),
        (built.agent.clone(), format!("{g}/{PROFILE}/gpumem")),
        (built.workload.clone(), format!("{g}/{PROFILE}/gpumem-workload")),
        (built.first_alloc.clone(), format!("{g}/{PROFILE}/first-alloc")),
        (built.workload.with_file_name("as-user"), format!("{g}/{PROFILE}/as-user")),
        (built.libcuda.clone(), format!("{g}/{PROFILE}/simcuda/libcuda.so.1")),
        (
            built.libcuda.with_file_name("libnvidia-ml.so.1"),
            format!("{g}/{PROFILE}/simcuda/libnvidia-ml.so.1"),
        ),
        (nvidia.path, "nvidia/libcuda.so.1".to_string()),
        (test_binary()?, "tests/e2e".to_string()),
    ])
}

/// Builds the guests' initramfs under `dir` for `selection`; its path.
fn initrd(built: &Built, busybox: PathBuf, selection: &Selection, dir: &Path) -> anyhow::Result<PathBuf> {
    let files = guest_files(built, busybox)?;
    let trees = python::trees(&built.setup.python, &root())?;
    let python = built.setup.python.display().to_string();
    std::fs::create_dir_all(dir)?;
    let initrd = dir.join("initramfs.cpio.gz");
    let (suites, skips) = selection.files();
    let repeat = selection.repeat.to_string();
    initramfs::build(
        &initramfs::Contents { files, trees },
        include_str!("init.sh"),
        &[
            ("etc/gpumem-skips", &skips),
            ("etc/gpumem-suites", &suites),
            ("etc/gpumem-python", &python),
            ("etc/gpumem-repeat", &repeat),
            ("etc/gpumem-profile", PROFILE),
        ],
        &dir.join("stage"),
        &initrd,
    )?;
    Ok(initrd)
}

/// Boots `k`, once more if the guest never reached its `/init` (QEMU or
/// the kernel failed before any test ran: nothing of ours was tried), and
/// says why with the console's last lines, which would otherwise be lost
/// with the machine.
fn boot(k: &kernels::Kernel, initrd: &Path, log: &Path, echo: bool) -> anyhow::Result<qemu::Boot> {
    let first = qemu::boot(k, initrd, log, PER_KERNEL, echo)?;
    if first.started() || first.timed_out {
        return Ok(first);
    }
    let tag = k.series;
    let say = |b: &qemu::Boot, what: &str| {
        println!(
            "[{tag}] {what}: QEMU ended ({}) after {:.1} s; the console's last lines:",
            b.status,
            b.wall.as_secs_f64()
        );
        for line in b.tail(40) {
            println!("[{tag}] | {line}");
        }
    };
    say(&first, "the guest never reached /init");
    println!("[{tag}] booting it once more");
    let again = qemu::boot(k, initrd, log, PER_KERNEL, echo)?;
    if !again.started() {
        say(&again, "again it never reached /init");
    }
    Ok(again)
}

/// Runs the matrix (only the columns named in `only`, if any), `lanes`
/// kernels at a time (see [`lanes`]), echoing each guest's lines as they
/// come, and returns one result per kernel, in the matrix's order.
pub fn matrix(
    built: &Built,
    only: &[String],
    selection: &Selection,
    lanes: usize,
) -> anyhow::Result<Vec<KernelResult>> {
    prepare(built, only, selection)?.run(lanes, true)
}

/// The matrix ready to boot: its kernels fetched, its initramfs built
/// (with copies of the build's binaries: a later build changes nothing in
/// it). It owns what it needs, so that it can run on a thread of its own
/// beside other work ([`Prepared::run`]).
pub struct Prepared {
    kernels: Vec<kernels::Kernel>,
    initrd: PathBuf,
    dir: PathBuf,
}

/// Fetches what the matrix needs (QEMU, busybox, the kernels, NVIDIA's
/// library) and builds its initramfs, for the columns named in `only`
/// (all if none).
pub fn prepare(built: &Built, only: &[String], selection: &Selection) -> anyhow::Result<Prepared> {
    ensure_tool("qemu-system-x86_64", "qemu-system-x86")?;
    let busybox = ensure_tool("busybox", "busybox-static")?;
    let kernels: Vec<_> = kernels::kernels()?
        .into_iter()
        .filter(|k| only.is_empty() || only.iter().any(|o| o == k.series))
        .collect();
    if kernels.is_empty() {
        bail!("no kernel of the matrix is named {only:?}; the columns are {:?}", kernels::columns());
    }
    let dir = target_dir().join("vm");
    let initrd = initrd(built, busybox, selection, &dir)?;
    Ok(Prepared { kernels, initrd, dir })
}

impl Prepared {
    /// Boots the kernels, `lanes` at a time. With `echo`, each guest's
    /// lines are printed as they come; without, they are kept in its
    /// result ([`KernelResult::console`]) for the caller to print when its
    /// own output is done.
    pub fn run(self, lanes: usize, echo: bool) -> anyhow::Result<Vec<KernelResult>> {
        let Self { kernels, initrd, dir } = self;
        let lanes = lanes.min(kernels.len());
        println!("xtask: {} kernel(s), {lanes} at a time", kernels.len());
        let queue = std::sync::Mutex::new(kernels.into_iter().enumerate());
        let mut results: Vec<(usize, KernelResult)> = std::thread::scope(|s| {
            let lane = || -> anyhow::Result<Vec<(usize, KernelResult)>> {
                let mut done = Vec::new();
                loop {
                    let Some((i, k)) = queue.lock().unwrap().next() else { return Ok(done) };
                    done.push((i, run_kernel(k, &initrd, &dir, echo)?));
                }
            };
            let handles: Vec<_> = (0..lanes).map(|_| s.spawn(lane)).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a matrix lane panicked"))
                .collect::<anyhow::Result<Vec<_>>>()
        })?
        .into_iter()
        .flatten()
        .collect();
        results.sort_by_key(|(i, _)| *i);
        Ok(results.into_iter().map(|(_, r)| r).collect())
    }
}

/// Boots one kernel with `initrd` and reads its result from the console.
fn run_kernel(k: kernels::Kernel, initrd: &Path, dir: &Path, echo: bool) -> anyhow::Result<KernelResult> {
    let header = format!("== kernel {} ({}) under QEMU", k.series, k.release);
    if echo {
        println!("{header}");
    }
    let log = dir.join(format!("{}.log", k.series));
    let boot = boot(&k, initrd, &log, echo)?;
    let mut tally = Tally::default();
    let (mut writes, mut user_writes) = (None, None);
    for l in &boot.lines {
        tally.line(l);
        if let Some(rest) = l.strip_prefix("GPUMEM-VM-PROBE uprobe_register_writes") {
            writes = Some(rest.trim_start().starts_with("yes"));
        }
        if let Some(rest) = l.strip_prefix("GPUMEM-VM-PROBE user_memory_writes") {
            user_writes = Some(rest.trim_start().starts_with("yes"));
        }
    }
    let r = KernelResult {
        series: k.series,
        release: k.release,
        tally,
        finished: boot.finished,
        timed_out: boot.timed_out,
        wall: boot.wall,
        register_writes: writes,
        user_writes,
        console: if echo { Vec::new() } else { [vec![header], boot.echoed].concat() },
        log,
    };
    if echo && !r.ok() {
        println!("{}", r.where_console());
    }
    Ok(r)
}
