//! `gpumem run`: find libcuda, load and attach, then stream records until
//! told to stop.
use std::{collections::HashSet, io::Write, os::unix::fs::MetadataExt, path::Path, time::Duration};

use anyhow::Context;
use aya::maps::{MapData, RingBuf};
use gpumem_common::map_name;
use tokio::{
    io::{unix::AsyncFd, Interest},
    signal::unix::{signal, SignalKind},
    sync::mpsc,
};

use crate::{
    agent::Agent,
    bpf::{
        discover::{self, Library},
        kernel::KernelMaps,
        limits::{Installed, LimitTable},
        AttachReport, Tracer,
    },
    cli::{Format, RunArgs},
    control, privileges,
    sink::{json::JsonSink, text::TextSink, Sink},
};

/// How often the agent drains records the kernel submitted quietly.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// The line tests and scripts wait for before they start a workload.
pub const READY: &str = "gpumem: ready";

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    privileges::check()?;
    raise_memlock();
    let libs =
        if args.libcuda.is_empty() { discover::discover()? } else { discover::explicit(&args.libcuda)? };
    let sink = open_sink(args.output.as_deref(), args.format)?;

    let (mut tracer, deny_reason) = open_tracer(args.ring_buffer)?;
    let limits = install_limits(&mut tracer, &args, deny_reason)?;
    let mut names = Vec::new();
    for lib in &libs.libs {
        let report = tracer.attach(lib)?;
        say_attached(&report);
        names.push(lib.path.display().to_string());
    }
    let ring: RingBuf<MapData> = tracer.take_map(map_name::EVENTS)?;
    // SAFETY: the RingBuf owns its map fd, which stays open and unchanged
    // until the AsyncFd (which owns the RingBuf) is dropped.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("watching the ring buffer: {e}"))?;
    let kernel = KernelMaps::take(&mut tracer)?;
    let mut agent = Agent::new(sink, kernel, names);
    agent.set_limit_table(limits);

    let (req_tx, mut req_rx) = mpsc::channel::<control::Request>(16);
    let server = control::serve(&args.socket, req_tx).await?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let deadline = async {
        match args.duration {
            Some(s) => tokio::time::sleep(Duration::from_secs_f64(s)).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    // The kernel submits records without waking the agent unless a backlog
    // builds up (see gpumem-ebpf's account.rs): drain on a short timer.
    let mut drain_tick = tokio::time::interval(DRAIN_EVERY);
    let mut rescan_tick = tokio::time::interval(Duration::from_secs_f64(args.rescan.max(0.05)));
    let mut rejected = HashSet::new();
    let mut usage_tick = tokio::time::interval(Duration::from_secs_f64(args.interval.unwrap_or(3600.0)));
    usage_tick.tick().await; // the first tick is immediate; usage starts one interval in
    eprintln!("gpumem: control socket {}", args.socket.display());
    eprintln!("{READY}");

    let result: anyhow::Result<()> = async {
        loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard.context("waiting on the ring buffer")?;
                    drain(guard.get_inner_mut(), &mut agent)?;
                    guard.clear_ready();
                    agent.flush().context("writing records")?;
                }
                Some((command, reply)) = req_rx.recv() => {
                    // Apply everything already in the ring first, so a
                    // status taken after a workload's calls returned
                    // includes them.
                    drain(ring.get_mut(), &mut agent)?;
                    agent.flush().context("writing records")?;
                    let text = match command.strip_prefix("limit ") {
                        Some(rest) => limit_command(&mut agent, rest),
                        None => answer(&mut agent, &command),
                    };
                    let _ = reply.send(text);
                }
                _ = sighup.recv() => reload(&mut agent, &args),
                _ = drain_tick.tick() => {
                    drain(ring.get_mut(), &mut agent)?;
                    agent.flush().context("writing records")?;
                }
                _ = stats_tick.tick() => agent.check_stats().context("writing records")?,
                _ = rescan_tick.tick(), if args.rescan > 0.0 => attach_new(&mut tracer, &mut agent, &mut rejected),
                _ = usage_tick.tick(), if args.interval.is_some() => agent.write_usage().context("writing records")?,
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                _ = &mut deadline => break,
            }
        }
        Ok(())
    }
    .await;

    server.abort();
    let _ = std::fs::remove_file(&args.socket);
    result?;
    drain(ring.get_mut(), &mut agent)?;
    agent.check_stats()?;
    agent.write_usage().context("writing the final usage records")?;
    tracer.detach_all();
    drop(tracer);
    eprintln!("gpumem: detached");
    Ok(())
}

fn cgroup_root() -> Option<std::path::PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| crate::enrich::cgroup::cgroup2_mount(&m))
}

/// --config, --limit and --default-action, checked as a whole.
fn policy(args: &RunArgs) -> anyhow::Result<crate::policy::config::Policy> {
    let file = args.config.as_deref().map(crate::policy::config::load).transpose()?;
    let root = cgroup_root();
    let exists = |p: &str| root.as_ref().is_some_and(|r| r.join(p.trim_start_matches('/')).is_dir());
    Ok(crate::policy::config::combine(file, args.limits.clone(), args.default_action, exists)?)
}

fn say_limit(verb: &str, i: &Installed) {
    let soft = i.limit.soft.map_or(String::new(), |s| format!(", soft {s} bytes"));
    let dev = i.limit.device.map_or(String::new(), |d| format!(" on device {d}"));
    eprintln!("gpumem: {verb}{}{dev}: {} bytes{soft}, action {}", i.limit.target, i.limit.hard, i.action);
}

/// The tracer with every program loaded, and why `deny` cannot rewrite
/// registers on this kernel (None: it can). Where the kernel lets uprobe
/// programs write registers, the programs are loaded with the deny path
/// live (see gpumem-ebpf's deny.rs), so a deny limit set at run time works
/// too. Asked before the programs are verified, so that they are verified
/// once.
fn open_tracer(ring_bytes: u32) -> anyhow::Result<(Tracer, Option<String>)> {
    let mut tracer = Tracer::open(false, ring_bytes)?;
    let deny_reason = tracer.register_write_refusal();
    if deny_reason.is_none() {
        tracer = Tracer::open(true, ring_bytes)?;
    }
    tracer.load_programs()?;
    Ok((tracer, deny_reason))
}

/// Reads and checks the policy (--config, --limit, --default-action) and
/// writes it into the kernel, saying what each limit will do.
fn install_limits(
    tracer: &mut Tracer,
    args: &RunArgs,
    deny_reason: Option<String>,
) -> anyhow::Result<LimitTable> {
    let policy = policy(args)?;
    let mut table = LimitTable::open(tracer, cgroup_root(), deny_reason, policy.default_action)?;
    for i in &table.install(&policy)? {
        say_limit("limit ", i);
    }
    Ok(table)
}

/// `limit list`, `limit set SPEC`, `limit clear TARGET` from the socket.
fn limit_command(agent: &mut Agent, command: &str) -> String {
    let (verb, rest) = command.split_once(' ').unwrap_or((command, ""));
    let result: Result<serde_json::Value, String> = match verb {
        "list" => serde_json::to_value(agent.limits.as_ref().map(LimitTable::list).unwrap_or_default())
            .map_err(|e| e.to_string()),
        "set" => crate::policy::Limit::parse(rest.trim()).and_then(|limit| {
            let i = agent.set_limit(&limit).map_err(|e| e.to_string())?;
            say_limit("limit set ", &i);
            Ok(serde_json::json!({ "set": i.limit.target.to_string(), "action": i.action.to_string() }))
        }),
        "clear" => crate::policy::spec::parse_target(rest.trim()).and_then(|target| {
            let i = agent.clear_limit(&target).map_err(|e| e.to_string())?;
            eprintln!("gpumem: limit cleared on {}", i.limit.target);
            Ok(serde_json::json!({ "cleared": i.limit.target.to_string() }))
        }),
        other => Err(format!("unknown limit command `{other}`; this agent answers `limit list|set|clear`")),
    };
    match result {
        Ok(v) => v.to_string(),
        Err(e) => error_json(&e),
    }
}

/// SIGHUP: reads --config again and applies the difference: changed and
/// new rules are set, rules no longer there cleared. A rule that cannot be
/// applied is reported and the others still are.
fn reload(agent: &mut Agent, args: &RunArgs) {
    let Some(path) = args.config.as_deref() else {
        eprintln!("gpumem: SIGHUP: no --config to reload; nothing changed");
        return;
    };
    let policy = match policy(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpumem: SIGHUP: {} not reloaded, the limits in force stay: {e:#}", path.display());
            return;
        }
    };
    let Some(table) = agent.limits.as_mut() else { return };
    table.set_default_action(policy.default_action);
    for target in table.targets() {
        if !policy.limits.iter().any(|l| l.target == target) {
            match agent.clear_limit(&target) {
                Ok(_) => eprintln!("gpumem: SIGHUP: limit cleared on {target}"),
                Err(e) => eprintln!("gpumem: SIGHUP: {e}"),
            }
        }
    }
    for limit in &policy.limits {
        match agent.set_limit(limit) {
            Ok(i) => say_limit("SIGHUP: limit ", &i),
            Err(e) => eprintln!("gpumem: SIGHUP: {e}"),
        }
    }
}

/// Attaches to every `libcuda.so*` that a process mapped since the last
/// look and that is a file gpumem has not seen (a container's own copy, a
/// driver upgrade). A file that cannot be attached is reported once.
fn attach_new(tracer: &mut Tracer, agent: &mut Agent, rejected: &mut HashSet<(u64, u64)>) {
    for path in discover::mapped_paths() {
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        let key = (meta.dev(), meta.ino());
        if tracer.libraries().any(|l| (l.dev, l.ino) == key) || rejected.contains(&key) {
            continue;
        }
        let lib = Library { path, dev: key.0, ino: key.1 };
        match tracer.attach(&lib) {
            Ok(report) => {
                say_attached(&report);
                agent.add_library(lib.path.display().to_string());
            }
            Err(e) => {
                eprintln!("gpumem: not attaching to {}: {e:#}", lib.path.display());
                rejected.insert(key);
            }
        }
    }
}

fn drain(ring: &mut RingBuf<MapData>, agent: &mut Agent) -> anyhow::Result<()> {
    while let Some(item) = ring.next() {
        agent.on_bytes(&item).context("writing records")?;
    }
    Ok(())
}

fn answer(agent: &mut Agent, command: &str) -> String {
    match command {
        "status" => serde_json::to_string(&agent.status()).unwrap_or_else(|e| error_json(&e.to_string())),
        other => error_json(&format!("unknown command `{other}`; this agent answers `status`")),
    }
}

fn error_json(msg: &str) -> String {
    serde_json::json!({ "error": msg }).to_string()
}

fn open_sink(output: Option<&Path>, format: Format) -> anyhow::Result<Box<dyn Sink>> {
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
    Ok(match format {
        Format::Json => Box::new(JsonSink::new(out)),
        Format::Text => Box::new(TextSink::new(out)),
    })
}

fn say_attached(r: &AttachReport) {
    eprintln!(
        "gpumem: attached {} probe(s) to {} (dev {}, inode {})",
        r.attached.len(),
        r.library.path.display(),
        r.library.dev,
        r.library.ino
    );
    if !r.missing.is_empty() {
        eprintln!("gpumem: {} does not export (skipped): {}", r.library.path.display(), r.missing.join(", "));
    }
    for (alias, first) in &r.aliases {
        eprintln!("gpumem: {alias} is an alias of {first} in {}: probed once", r.library.path.display());
    }
}

/// Older kernels charge BPF maps to RLIMIT_MEMLOCK; newer ones to the memory
/// cgroup. Raising it may be refused (no CAP_SYS_RESOURCE): harmless there.
fn raise_memlock() {
    let lim = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: valid pointer to an rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}
