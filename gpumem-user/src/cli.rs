//! Command-line interface: one struct per subcommand.
use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand, ValueEnum};

mod duration;

pub use self::duration::{parse_duration, parse_duration_or_off, parse_refresh, DurationError};
use crate::{
    bpf::LinkMode,
    control::DEFAULT_SOCKET,
    limits::policy::{
        env::{parse_env_limits, parse_env_max},
        size::parse_ring_size,
        Action, Limit,
    },
};

#[derive(Debug, Parser)]
#[command(
    name = "gpumem",
    version,
    about = "Trace every GPU memory allocation on this host, per process and per cgroup, with eBPF",
    long_about = "gpumem attaches eBPF uprobes to the CUDA driver library (libcuda.so) and sees every \
allocation and free any process asks the driver for, without touching the process. It attributes \
memory to process, cgroup (container, pod), device and memory kind, and streams JSON Lines."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach to libcuda and stream allocation records (needs root).
    Run(Box<RunArgs>),
    /// Ask the running agent what each process and cgroup holds now.
    Status(StatusArgs),
    /// A live view of the running agent, redrawn every second: devices,
    /// limits as bars, cgroups and pods with their processes by memory
    /// kind, the latest limit decisions and failed allocations, and the
    /// oldest live allocations of the selected process (leaks). Keys: q
    /// quits, s sorts, / filters, arrows and PageUp/PageDown scroll.
    Top(TopArgs),
    /// Change the running agent's limits without restarting it (as root).
    /// `gpumem run` with --config also rereads its file on SIGHUP.
    Limit(LimitArgs),
    /// Report what this kernel allows: uprobes, ring buffer, BTF, cgroup v2,
    /// signals from BPF, uprobe register writes (needed by deny); with
    /// --libcuda, where each probe would sit in that library.
    Probe(ProbeArgs),
    /// Remove what `gpumem run --persist` left in the kernel: every pinned
    /// probe (detached) and map, so nothing of gpumem stays (as root, with
    /// no agent running).
    Detach(DetachArgs),
    /// Attach empty programs at every probe site (for `cargo xtask bench`).
    #[command(hide = true)]
    Floor(FloorArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One JSON object per line (see docs/records.md for the schema).
    Json,
    /// One aligned line per record, for people.
    Text,
}

#[derive(Debug, Parser)]
pub struct RunArgs {
    /// A libcuda file to attach to (repeatable). Without it gpumem searches
    /// the ldconfig cache, the usual install directories and the libraries
    /// mapped by running processes.
    #[arg(long, value_name = "PATH")]
    pub libcuda: Vec<PathBuf>,
    /// Exit at start when no libcuda.so* is found (or a --libcuda file is
    /// not there), as a service that must trace from its start wants.
    /// Without it the agent starts anyway, says what it waits for, serves
    /// status and metrics, and attaches to the driver's library when one
    /// appears (an NVIDIA driver container that starts after gpumem's,
    /// under /run/nvidia/driver; an installation; a process that maps one).
    #[arg(long)]
    pub require_libcuda: bool,
    /// An NVIDIA management library file (libnvidia-ml) to attach to
    /// (repeatable), so that limited processes asking NVML for a card's
    /// memory are told their limit's view, as they are by libcuda. Without
    /// it gpumem searches as for libcuda, and runs on if it finds none.
    #[arg(long, value_name = "PATH")]
    pub libnvml: Vec<PathBuf>,
    /// Write records to FILE instead of standard output (appends).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
    /// Stop after this long (seconds, or `90s`, `5m`, `1h`; default: run
    /// until SIGINT or SIGTERM).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Also write `usage` records for every process and cgroup holding
    /// memory this often (seconds, or `30s`, `5m`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// This often, look for `libcuda.so*` (and `libnvidia-ml.so*`) files
    /// newly mapped by any process (a container's own copy) and attach to
    /// them; 0 turns it off.
    #[arg(long, value_name = "DURATION", default_value = "1", value_parser = parse_duration_or_off)]
    pub rescan: Duration,
    /// The control socket `gpumem status` talks to. One agent per socket:
    /// the agent locks PATH.lock before it loads anything, and a second
    /// agent on the same socket is refused.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// A limit, decided in the kernel at each allocation (repeatable):
    /// TARGET=HARD[,soft=SIZE][,action=ACTION][,fallback=ACTION][,device=N][,view=VIEW]
    /// with TARGET cgroup:/path (the cgroup and everything below it),
    /// pid:N or comm:NAME; sizes like 512MiB or 8GiB; ACTION audit,
    /// signal[:SIG] or deny; VIEW limit (processes under it are told the
    /// limit as the card's size, so frameworks size themselves to it; the
    /// default where the kernel allows it, see `gpumem probe`) or driver.
    /// Kubernetes pods: namespace:NS (each pod on its own; with
    /// `,per=namespace` all of them together) and pod:NS/GLOB. See
    /// docs/limits.md and docs/pod-limits.md.
    #[arg(long = "limit", value_name = "SPEC", value_parser = Limit::parse)]
    pub limits: Vec<Limit>,
    /// Limits from a TOML file (see docs/limits.md and deploy/gpumem.toml), added to --limit.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The action of limits that name none [default: signal:SIGKILL].
    #[arg(long, value_name = "ACTION", value_parser = Action::parse)]
    pub default_action: Option<Action>,
    /// Which limits declared in a workload's own environment are honoured
    /// [default: all]: GPUMEM_LIMIT (a --limit rule's right-hand side, e.g.
    /// `8GiB,action=deny`), CUDA_DEVICE_MEMORY_LIMIT (HAMi's, with
    /// `_<i>` per device), NVIDIA_GPU_MEMORY_LIMIT (NVIDIA's container
    /// toolkit's, MiB), GPU_MEMORY_LIMIT (KAI's, MiB); comma-separated, or
    /// all, or none. Read by the kernel at exec: a declaring process is
    /// bound from its first allocation. See docs/declared-limits.md.
    #[arg(long, value_name = "NAMES", value_parser = parse_env_limits)]
    pub env_limits: Option<u32>,
    /// The most a declared limit may set: a value above it is clamped to
    /// it (and the `declared` record says so).
    #[arg(long, value_name = "SIZE", value_parser = parse_env_max)]
    pub env_limits_max: Option<u64>,
    /// Size of the kernel ring buffer records wait in for the agent (a
    /// power of two, 64KiB to 1GiB). Records that find it full are lost,
    /// counted, and reported in `dropped` records; raise it if they are.
    /// The agent's resident size includes it twice (the kernel maps it
    /// twice, for records that wrap).
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = parse_ring_size)]
    pub ring_buffer: u32,
    /// Run the agent at nice -N (0 to 20; 0 leaves its priority as
    /// started, and a start at a lower nice value is kept), so that on a
    /// host whose cores the traced processes keep busy it still reads the
    /// ring as fast as they fill it (auditd's `priority_boost` does the
    /// same). It takes only the time its records need. Needs CAP_SYS_NICE;
    /// refused, the agent warns and runs on as started.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u8).range(0..=20))]
    pub priority_boost: u8,
    /// Log, from the eBPF programs, each limit decision, deny rewrite and
    /// full map (as `gpumem: bpf: ...` lines on stderr):
    /// for when something looks wrong. Off, it costs nothing: the verifier
    /// removes the logging from the programs.
    #[arg(long)]
    pub bpf_log: bool,
    /// How the probes are linked: multi-uprobe links (one per program and
    /// library, kernel 6.6+: a stop detaches in milliseconds), single ones
    /// (one per probe: about 100 ms each to detach, seconds per library),
    /// or auto (multi where the kernel has them; single where its verifier
    /// refuses the programs for them, saying why, and with --bpf-log, whose
    /// log functions the multi-link loader cannot verify apart).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub uprobe_links: LinkMode,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (off unless
    /// asked): memory held per process and cgroup by device and kind,
    /// limits and their usage, limit decisions, failed allocations, records
    /// lost, NVML's view where it loads. Port 0 picks a free port (the
    /// address bound is logged). Anyone who can reach it sees process
    /// names and cgroup paths: bind to loopback or a node-local address.
    /// See docs/metrics.md.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Keep gpumem in the kernel when the agent stops (however it stops):
    /// probes attached, maps (usage, live allocations, limits and their
    /// usage) pinned under --pin-dir, so the kernel goes on counting and
    /// enforcing. The next `run --persist` of the same build adopts them,
    /// with their rules (--limit and --config apply over them as a SIGHUP
    /// would); one of another build takes them over without a gap, and
    /// settles a takeover that was interrupted; `gpumem detach` removes
    /// them. One agent at a time holds --pin-dir; a SIGTERM while it starts
    /// takes effect once the start is complete. See docs/persist.md.
    #[arg(long)]
    pub persist: bool,
    /// Where --persist pins (in bpffs, mounted at /sys/fs/bpf if need be).
    /// Without --persist, the agent refuses to start while pins are there.
    #[arg(long, value_name = "DIR", default_value = crate::bpf::persist::DEFAULT_ROOT)]
    pub pin_dir: PathBuf,
}

#[derive(Debug, Parser)]
pub struct DetachArgs {
    /// Where `gpumem run --persist` pinned (refused while an agent holds
    /// it).
    #[arg(long, value_name = "DIR", default_value = crate::bpf::persist::DEFAULT_ROOT)]
    pub pin_dir: PathBuf,
    /// A running agent's control socket (detach refuses if one answers).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

#[derive(Debug, Parser)]
pub struct FloorArgs {
    #[arg(long, value_name = "PATH", required = true)]
    pub libcuda: Vec<PathBuf>,
}

#[derive(Debug, Parser)]
pub struct ProbeArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also say, for this libcuda file (repeatable), where each probe would
    /// go and how this kernel would run it there: emulated at the entry,
    /// shifted to an instruction it emulates, or single-stepped (a second
    /// trap on every call). Reads the file; attaches nothing.
    #[arg(long, value_name = "PATH")]
    pub libcuda: Vec<PathBuf>,
    /// The same for this libnvidia-ml file (repeatable): where NVML's
    /// memory queries would be probed for the limit's view.
    #[arg(long, value_name = "PATH")]
    pub libnvml: Vec<PathBuf>,
}

#[derive(Debug, Parser)]
pub struct StatusArgs {
    /// The running agent's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Parser)]
pub struct TopArgs {
    /// The running agent's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// How often to ask the agent (seconds, or `500ms`; at most 1s).
    #[arg(long, value_name = "DURATION", default_value = "1", value_parser = parse_refresh)]
    pub interval: Duration,
    /// The order of cgroups and their processes (`s` cycles it).
    #[arg(long, value_enum, default_value_t = SortBy::Bytes)]
    pub sort: SortBy,
    /// Show only processes whose command, cgroup, pod, namespace or
    /// container contains TEXT (any case; `/` changes it).
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
}

/// How `gpumem top` orders its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortBy {
    /// Most memory held first.
    Bytes,
    /// Lowest process id first.
    Pid,
    /// By command (processes) and cgroup or pod (groups), A to Z.
    Name,
}

impl SortBy {
    /// The next order (`s` in `gpumem top`).
    pub fn next(self) -> Self {
        match self {
            Self::Bytes => Self::Pid,
            Self::Pid => Self::Name,
            Self::Name => Self::Bytes,
        }
    }

    /// The name `--sort` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bytes => "bytes",
            Self::Pid => "pid",
            Self::Name => "name",
        }
    }
}

#[derive(Debug, Parser)]
pub struct LimitArgs {
    #[command(subcommand)]
    pub action: LimitAction,
    /// The running agent's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET, global = true)]
    pub socket: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum LimitAction {
    /// The limits in force, with what each counts now.
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Set a limit, in --limit's syntax (`cgroup:/team-a=8GiB,soft=6GiB,action=deny`).
    /// A target with a limit keeps its usage and gets the new numbers and
    /// action; a new target's limit counts what it already holds (a process
    /// running away can be capped where it stands).
    Set {
        #[arg(value_name = "SPEC")]
        spec: String,
    },
    /// Take the limit on TARGET (`cgroup:/path`, `pid:N`, `comm:NAME`) out of force.
    Clear {
        #[arg(value_name = "TARGET")]
        target: String,
    },
}

impl RunArgs {
    /// How often to look for new libraries; None: never.
    pub fn rescan_every(&self) -> Option<Duration> {
        (!self.rescan.is_zero()).then_some(self.rescan)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_parses_repeatable_libcuda_and_rejects_bad_durations() {
        let cli =
            Cli::try_parse_from(["gpumem", "run", "--libcuda", "/a", "--libcuda", "/b", "--duration", "1.5"])
                .unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!(run.libcuda, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(run.duration, Some(Duration::from_millis(1500)));
        assert_eq!(run.rescan_every(), Some(Duration::from_secs(1)), "the default");
        let cli = Cli::try_parse_from(["gpumem", "run", "--duration", "2m", "--rescan", "0"]).unwrap();
        let Command::Run(run) = cli.command else { panic!("not run") };
        assert_eq!((run.duration, run.rescan_every()), (Some(Duration::from_secs(120)), None));
        for bad in ["0", "-1", "soon", "inf", "1e30"] {
            let err = Cli::try_parse_from(["gpumem", "run", "--duration", bad]).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn top_refreshes_at_least_once_a_second_and_sorts_three_ways() {
        let cli = Cli::try_parse_from(["gpumem", "top"]).unwrap();
        let Command::Top(top) = cli.command else { panic!("not top") };
        assert_eq!((top.interval, top.sort, top.filter), (Duration::from_secs(1), SortBy::Bytes, None));
        assert_eq!(top.socket, PathBuf::from(DEFAULT_SOCKET));
        let cli =
            Cli::try_parse_from(["gpumem", "top", "--interval", "250ms", "--sort", "name", "--filter", "py"])
                .unwrap();
        let Command::Top(top) = cli.command else { panic!("not top") };
        assert_eq!((top.interval, top.sort), (Duration::from_millis(250), SortBy::Name));
        assert_eq!(top.filter.as_deref(), Some("py"));
        for bad in ["2", "1.5s", "0", "soon"] {
            let err = Cli::try_parse_from(["gpumem", "top", "--interval", bad]).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
        let names: Vec<_> = std::iter::successors(Some(SortBy::Bytes), |s| Some(s.next()))
            .take(4)
            .map(SortBy::name)
            .collect();
        assert_eq!(names, ["bytes", "pid", "name", "bytes"]);
    }

    #[test]
    fn limit_takes_a_verb_and_the_socket_anywhere() {
        let cli = Cli::try_parse_from(["gpumem", "limit", "set", "pid:1=1GiB", "--socket", "/s"]).unwrap();
        let Command::Limit(l) = cli.command else { panic!("not limit") };
        assert_eq!(l.socket, PathBuf::from("/s"));
        assert!(matches!(l.action, LimitAction::Set { ref spec } if spec == "pid:1=1GiB"));
        assert!(Cli::try_parse_from(["gpumem", "limit"]).is_err(), "a verb is required");
        assert!(Cli::try_parse_from(["gpumem", "limit", "list", "--json"]).is_ok());
    }
}
