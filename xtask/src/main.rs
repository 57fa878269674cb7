//! `cargo xtask`: everything a fresh machine needs, from the toolchain to
//! the demo. Each subcommand sets up what it needs first.
mod apt;
mod artifacts;
mod bench;
mod demo;
mod deploy;
mod fuzz;
mod gpu_kit;
mod image;
mod lint;
mod nvidia;
mod prometheus;
mod setup;
mod soak;
mod tally;
mod test;
mod util;
mod vm;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Set up, build, demo and test gpumem")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what building needs (nightly rust-src, bpf-linker against the
    /// nightly's own LLVM, the cuda-bindings venv). Idempotent and fast when
    /// everything is present.
    Setup,
    /// Set up, then build the agent, the eBPF object, the simulated driver
    /// (target/simcuda/libcuda.so.1) and the workload generator.
    Build,
    /// Build, then run `gpumem run ARGS` (as root).
    BuildAndRun {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build, then trace demo workloads in two cgroups on the simulated driver.
    Demo,
    /// Formatting and clippy (warnings denied), user space and eBPF.
    Lint,
    /// Measure tracing overhead side by side (release build, as root);
    /// writes target/bench/report.md and report.json.
    Bench {
        /// A reduced run (fewer repetitions and pairs).
        #[arg(long)]
        quick: bool,
        /// Only attaching and detaching 1 and 20 libraries (writes
        /// target/bench/attach.json and prints its table).
        #[arg(long)]
        attach_only: bool,
        /// Only the agent under load: this build's agent and AGENT
        /// (another build's release `gpumem`, e.g. of the commit before a
        /// change: `git worktree add`, `cargo build --release`) under the
        /// same loads, alternately, 3 rounds (7 without --quick); prints
        /// each figure's medians and this/AGENT ratios and writes
        /// target/bench/load_against.json.
        #[arg(long, value_name = "AGENT", conflicts_with = "attach_only")]
        load_against: Option<std::path::PathBuf>,
        /// Only the time inside the programs, per pair of the plain and the
        /// stream-ordered pool loops: this build's agent and AGENT (another
        /// build's release `gpumem`, or this one's with --against-env),
        /// alternately, 4 rounds of 200,000 pairs (8 of 1,000,000 without
        /// --quick);
        /// prints medians and ranges per program and this/AGENT ratios and
        /// writes target/bench/programs_against.json.
        #[arg(long, value_name = "AGENT", conflicts_with_all = ["attach_only", "load_against"])]
        programs_against: Option<std::path::PathBuf>,
        /// NAME=VALUE in AGENT's environment (repeatable), e.g.
        /// GPUMEM_TASK_CALLS=off: every call in flight in the hash map.
        #[arg(long, value_name = "NAME=VALUE", requires = "programs_against")]
        against_env: Vec<String>,
        /// A limit both agents of --programs-against run with (repeatable,
        /// `gpumem run --limit`'s syntax), e.g. `cgroup:/=1TiB,action=audit`:
        /// the programs' cost with limits in force.
        #[arg(long, value_name = "SPEC", requires = "programs_against")]
        with_limit: Vec<String>,
        /// Run --programs-against's loops in a cgroup N levels below the
        /// root (gpumem-bench/1/2/... under the cgroup2 mount), as a pod's
        /// container is (4 under the kubelet's systemd driver): what a
        /// cgroup limit's walk of the caller's ancestors costs there.
        #[arg(long, value_name = "N", default_value_t = 0, requires = "programs_against",
              value_parser = clap::value_parser!(u32).range(0..=12))]
        cgroup_depth: u32,
        /// Run --programs-against's two agents attached at once, so that
        /// both builds' programs run at the same hits (each round swaps
        /// which attached first, whose programs then run second): a
        /// change of a few percent measured through the host's drift.
        #[arg(long, requires = "programs_against")]
        together: bool,
        /// Only start-up: this build's agent and AGENT (another build's
        /// release `gpumem`) started one after the other, 12 rounds (24
        /// without --quick), the order swapped each round, each timed to
        /// `gpumem: ready`; prints medians, ranges and the median of each
        /// round's this/AGENT ratio and writes target/bench/start_against.json.
        #[arg(long, value_name = "AGENT", conflicts_with_all = ["attach_only", "load_against", "programs_against"])]
        start_against: Option<std::path::PathBuf>,
        /// Start --start-against's agents on NVIDIA's own 550 libcuda (28
        /// MB, fetched as `cargo xtask nvidia` does) rather than the
        /// simulated driver: what a start costs where the library is a
        /// real one.
        #[arg(long, requires = "start_against")]
        on_nvidia: bool,
    },
    /// Lint, build, then run the unit tests, the deployment files' checks,
    /// the privileged end-to-end tests on this kernel and, beside them, the
    /// fuzz targets (built at the lowest priority) and the limit and
    /// tracing suites on the kernel matrix under QEMU (their lines printed
    /// after the host's); ends with an `N passed, N failed` line.
    Test,
    /// Only the deployment files' checks (also part of `test`): the example
    /// limits file, the systemd unit and the DaemonSet against the agent's
    /// own parsers, `systemd-analyze verify` on the unit, Kubernetes'
    /// schemas (kubernetes-validate, strict) on deploy/kubernetes/.
    /// Installs kubernetes-validate in a venv and Debian's systemd package
    /// where missing.
    DeployCheck,
    /// Fetch NVIDIA's own driver libraries (libcuda1 535, 550 and 555 from
    /// Debian's non-free packages, cached) and print where each is, e.g.
    /// for `gpumem probe --libcuda PATH`. The tests and the bench use them.
    Nvidia,
    /// Fetch Debian's Prometheus server (bookworm's `prometheus` package,
    /// cached) and print its path: the metrics test scrapes the agent with
    /// it.
    Prometheus,
    /// Build the GPU kit under target/gpu-kit (at most 64 MiB): the release
    /// agent and tests/gpukit's scripts. On a machine with an NVIDIA GPU,
    /// its driver and the usual Python stack (PyTorch, JAX, CuPy,
    /// numba-cuda, cuda.core), `./run.sh` there, as root, compares each
    /// framework's figures with gpumem's and NVML's and writes a report.
    GpuKit,
    /// Build the agent's OCI image with podman, pulling nothing: the release
    /// binary and the few files it needs (the host's libc, ldconfig,
    /// busybox), `FROM scratch`; tagged gpumem:VERSION and
    /// gpumem:VERSION-COMMIT, its size printed. deploy/container/Dockerfile
    /// builds one on Debian's base where a registry is reachable.
    Image {
        /// Also build the image of another build (tagged ...-COMMIT-next:
        /// the same source with a build note in its eBPF object), whose
        /// agent takes the first's pinned state over as a newer release's
        /// would: what the upgrade test replaces the first with.
        #[arg(long)]
        next: bool,
    },
    /// Coverage-guided fuzzing (cargo-fuzz, libFuzzer, the address
    /// sanitizer; installed if missing) of every parser that takes input
    /// from outside the agent: records from the kernel, the control
    /// protocol, the limits file and limit arguments, declared limits,
    /// /proc and cgroup texts, the kubelet's names, driver code bytes.
    /// Seeds in fuzz/corpus, findings in target/fuzz; a crash fails it and
    /// says how to replay it. `cargo xtask test` runs each for 10 s.
    Fuzz {
        /// How long each target runs.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
        /// Only these targets (repeatable).
        #[arg(long = "target")]
        targets: Vec<String>,
        /// Merge what was found into the seeds in fuzz/corpus (inputs
        /// that add coverage only).
        #[arg(long)]
        save: bool,
    },
    /// The soak alone, as root: rounds of random workloads (every family,
    /// threads, a container, exec, processes killed mid-call) under limits
    /// changed through the file and the control socket, while the agent is
    /// SIGSTOPped, restarted, killed and replaced by another build with
    /// --persist and its output's disk filled; every process, cgroup and
    /// limit compared with the workloads' truth at every checkpoint; the
    /// agent's memory held flat. Writes target/soak/report.json. `cargo
    /// xtask test` runs it for 150 s.
    Soak {
        /// How long it runs.
        #[arg(long, default_value_t = 10)]
        minutes: u32,
        /// The seed each round draws from (default: the time; printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Each round's length, 15 to 60 s.
        #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(15..=60))]
        round_seconds: u32,
    },
    /// Only the kernel matrix: boot stock Debian kernels (6.1, 6.12, 6.18,
    /// sid's newest) under QEMU and run the limit and tracing suites in each,
    /// built in the profile `matrix` (optimised, debug checks kept). One kernel
    /// boots at a time per CPU of this machine, as the memory available
    /// holds at 4 GiB each, up to the four (GPUMEM_VM_LANES), each with two
    /// CPUs (GPUMEM_VM_SMP); each console is kept in target/vm/<column>.log.
    Vm {
        /// Only these columns (repeatable): 6.1, 6.12, 6.18, sid.
        #[arg(long = "kernel")]
        kernels: Vec<String>,
        /// Only the end-to-end tests whose names contain this (repeatable),
        /// in place of the matrix's suites; known failures named here run.
        #[arg(long = "test")]
        tests: Vec<String>,
        /// Run the selection this many times in each kernel, stopping at
        /// the first failure: for races a kernel shows now and then.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Setup => setup::setup().map(|_| ()),
        Cmd::Build => artifacts::build().map(|_| ()),
        Cmd::BuildAndRun { args } => artifacts::build_and_run(&args),
        Cmd::Demo => demo::demo(),
        Cmd::Lint => lint::lint(),
        Cmd::Bench {
            quick,
            attach_only,
            load_against,
            programs_against,
            against_env,
            with_limit,
            cgroup_depth,
            together,
            start_against,
            on_nvidia,
        } => bench::bench(
            quick,
            bench::Only {
                attach: attach_only,
                load_against: load_against.as_deref(),
                programs_against: programs_against.as_deref().map(|p| bench::Against {
                    agent: p,
                    env: &against_env,
                    limits: &with_limit,
                    cgroup_depth,
                    together,
                }),
                start_against: start_against.as_deref(),
                on_nvidia,
            },
        ),
        Cmd::Test => test::test(),
        Cmd::DeployCheck => test::deploy_only(),
        Cmd::Nvidia => nvidia::print(),
        Cmd::Prometheus => prometheus::server().map(|p| println!("{}", p.display())),
        Cmd::GpuKit => gpu_kit::gpu_kit(),
        Cmd::Fuzz { seconds, targets, save } => fuzz::fuzz(seconds, &targets, save).map(drop),
        Cmd::Image { next: false } => image::image().map(drop),
        Cmd::Image { next: true } => image::upgrade_pair("release").map(drop),
        Cmd::Soak { minutes, seed, round_seconds } => soak::soak(minutes, seed, round_seconds),
        Cmd::Vm { kernels, tests, repeat } => test::vm_only(&kernels, &vm::Selection { tests, repeat }),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
