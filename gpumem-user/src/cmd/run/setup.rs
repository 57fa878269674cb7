//! What `gpumem run` does before its event loop: the tracer, the policy,
//! the sink; and attaching libraries found while it runs.
use std::{io::Write, os::unix::fs::MetadataExt, path::Path};

use anyhow::Context;
use gpumem_common::{LiveAlloc, LiveKey};

use crate::{
    agent::Agent,
    bpf::{
        attach::AttachReport,
        discover::{self, Library},
        handover::TookOver,
        persist::lock::RootLock,
        rescan::Rescan,
        BpfError, LinkMode, Options, Tracer,
    },
    cli::{Format, RunArgs},
    enrich::cgroup::host_cgroup2_mount,
    ledger::Ledger,
    limits::{
        describe,
        policy::config::{self, Policy},
        Limits,
    },
    sink::{json::JsonSink, records::Records, text::TextSink, Sink},
};

pub fn cgroup_root() -> Option<std::path::PathBuf> {
    host_cgroup2_mount()
}

/// --config, --limit and --default-action, checked as a whole.
pub fn policy(args: &RunArgs) -> anyhow::Result<Policy> {
    let file = args.config.as_deref().map(config::load).transpose()?;
    let root = cgroup_root();
    let exists = |p: &str| root.as_ref().is_some_and(|r| r.join(p.trim_start_matches('/')).is_dir());
    let given = config::Given {
        limits: args.limits.clone(),
        default_action: args.default_action,
        env_limits: args.env_limits,
        env_limits_max: args.env_limits_max,
    };
    Ok(config::combine(file, given, exists)?)
}

/// The tracer with every program loaded, and why `deny` cannot rewrite
/// registers on this kernel (None: it can). Where the kernel lets uprobe
/// programs write registers, the programs are loaded with the deny path
/// live (see gpumem-ebpf's deny.rs), so a deny limit set at run time works
/// too. Asked with a program of its own before the object is opened
/// (`bpf::register_write_refusal`), so that it is opened and verified once.
/// With --persist, the object is opened for good with its maps pinned
/// (an earlier agent's of the same build adopted, see `bpf::persist`).
pub fn open_tracer(args: &RunArgs, root: Option<&RootLock>) -> anyhow::Result<(Tracer, Option<String>)> {
    let deny_reason = crate::bpf::register_write_refusal();
    crate::start_phases::done("asking whether programs may write registers");
    let options = Options {
        deny_by_registers: deny_reason.is_none(),
        ring_bytes: args.ring_buffer,
        bpf_log: args.bpf_log,
        links: args.uprobe_links,
    };
    let mut tracer = Tracer::open_pinned(options, root)?;
    crate::start_phases::done("the rest of opening the object");
    match tracer.load_programs() {
        Ok(()) => Ok((tracer, deny_reason)),
        // `auto` takes what works: the kernel refused the programs for
        // multi links (the verifier, most likely), single links take the
        // same programs verified as plain uprobes.
        Err(BpfError::Multi(why)) if args.uprobe_links == LinkMode::Auto && tracer.multi_links() => {
            tracing::warn!(
                "--uprobe-links auto: the programs could not be loaded for multi-uprobe links, so single links are \
                 used (every probe the same; a stop detaches more slowly). Why: {why}"
            );
            tracer.discard();
            let mut tracer = Tracer::open_pinned(Options { links: LinkMode::Single, ..options }, root)?;
            tracer.load_programs()?;
            Ok((tracer, deny_reason))
        }
        Err(e) => Err(e.into()),
    }
}

/// The limits: installed from the policy, or, adopting pinned state, the
/// kernel's rules taken over with their usage and the policy (where one
/// was given) applied over them as a SIGHUP would.
pub fn limits(
    args: &RunArgs,
    tracer: &mut Tracer,
    deny_reason: Option<String>,
    adopted: bool,
    (ledger, held): (&Ledger, &[(LiveKey, LiveAlloc)]),
) -> anyhow::Result<Limits> {
    let policy = policy(args)?;
    let (limits, installed) = if adopted {
        let given = args.config.is_some() || !args.limits.is_empty() || args.default_action.is_some();
        let live = ledger.live_allocations();
        Limits::adopt(tracer, &policy, given, cgroup_root(), deny_reason, (&live, held))?
    } else {
        Limits::install(tracer, &policy, cgroup_root(), deny_reason)?
    };
    for i in &installed {
        tracing::info!("{}", describe(if adopted { "limit (adopted)" } else { "limit" }, i));
    }
    Ok(limits)
}

pub fn open_sink(output: Option<&Path>, format: Format) -> anyhow::Result<Records> {
    let out: Box<dyn Write + Send> = match output {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening --output {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    let sink: Box<dyn Sink> = match format {
        Format::Json => Box::new(JsonSink::new(out)),
        Format::Text => Box::new(TextSink::new(out)),
    };
    let name = output.map_or("standard output".into(), |p| p.display().to_string());
    Ok(Records::new(sink, name))
}

/// A completed takeover, said.
pub fn say_took_over(took: &TookOver) {
    let waited = match took.calls {
        0 => String::new(),
        n => format!(
            " (after {} ms waiting for {n} call(s) in flight that entered before this build's return probes)",
            took.waited.as_millis()
        ),
    };
    tracing::info!(
        "took over from build {}: its programs stood down and its {} link(s) detached in {} ms{waited}; this \
         build counts and enforces alone",
        took.from.build,
        took.removed.links,
        took.detach.as_millis()
    );
}

pub fn say_attached(r: &AttachReport) {
    let path = r.library.path.display();
    let links = match r.multi_links {
        0 => String::new(),
        n => format!(" through {n} multi-uprobe links"),
    };
    tracing::info!(
        "{} {} probe(s) ({} with a return probe) to {path}{links} (dev {}, inode {}) in {} ms",
        if r.adopted { "adopted the pinned" } else { "attached" },
        r.attached.len(),
        r.returns,
        r.library.dev,
        r.library.ino,
        r.took.as_millis()
    );
    if !r.missing.is_empty() {
        tracing::info!("{path} does not export (skipped): {}", r.missing.join(", "));
    }
    for (alias, first) in &r.aliases {
        tracing::info!("{alias} is an alias of {first} in {path}: probed once");
    }
}

/// Attaches to every `libcuda.so*` (and, where the view is served,
/// `libnvidia-ml.so*`) that a process mapped since the last look and that
/// is a file gpumem has not seen (a container's own copy, a driver
/// upgrade). A file that cannot be attached is reported once.
pub fn attach_new(tracer: &mut Tracer, agent: &mut Agent, rescan: &mut Rescan, given: &[std::path::PathBuf]) {
    let mut candidates = rescan.mapped_since();
    // No driver's library yet: the install directories and the given
    // paths too, so that the agent attaches before a process maps it.
    if !tracer.libraries().any(|l| l.kind == gpumem_common::api::Library::Cuda) {
        candidates.extend(discover::installed(given));
    }
    for path in candidates {
        let Some(kind) = discover::kind_of(&path).filter(|&k| tracer.serves(k)) else { continue };
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        let key = (meta.dev(), meta.ino());
        if tracer.libraries().any(|l| (l.dev, l.ino) == key) || rescan.rejected.contains(&key) {
            continue;
        }
        let lib = Library { path, dev: key.0, ino: key.1, kind };
        match tracer.attach(&lib) {
            Ok(report) => {
                say_attached(&report);
                agent.add_library(&report);
            }
            Err(e) => {
                tracing::warn!("not attaching to {}: {}", lib.path.display(), crate::chain(&e));
                rescan.rejected.insert(key);
            }
        }
    }
}

/// Older kernels charge BPF maps to RLIMIT_MEMLOCK; newer ones to the memory
/// cgroup. Raising it may be refused (no CAP_SYS_RESOURCE): harmless there.
pub fn raise_memlock() {
    use nix::sys::resource::{setrlimit, Resource, RLIM_INFINITY};
    let _ = setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY);
}
