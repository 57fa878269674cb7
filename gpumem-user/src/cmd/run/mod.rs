//! `gpumem run`: find libcuda, load and attach (`setup.rs`) or adopt what
//! an earlier `--persist` agent left pinned, then run the event loop
//! (`event_loop.rs`) until told to stop, and detach (or, with `--persist`,
//! leave everything attached and pinned).
mod event_loop;
mod idle;
mod priority;
mod setup;

use anyhow::Context;
use gpumem_common::map_name;
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    agent::Agent,
    bpf::{
        attach::AttachReport,
        discover::{self, LibrarySet},
        handover::Completion,
        kernel::KernelMaps,
        persist::{self, lock::RootLock},
        probes::Library,
        ring::Ring,
        Tracer,
    },
    cli::RunArgs,
    ledger::Ledger,
    memory,
    output::lines::monotonic_ns,
    privileges,
    sink::records::Records,
};

/// The line (on stderr) tests and scripts wait for before they start a
/// workload: the log line of the message `ready`.
pub const READY: &str = "gpumem: ready";

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    crate::start_phases::begin();
    privileges::check()?;
    // Held until the agent has detached: a second agent on this socket is
    // refused before it loads anything.
    let _socket_lock = crate::control::lock::SocketLock::take(&args.socket)?;
    setup::raise_memlock();
    priority::boost(args.priority_boost);
    if !args.persist {
        persist::refuse_unadopted(&args.pin_dir)?;
    } else if std::os::unix::net::UnixStream::connect(&args.socket).is_ok() {
        // Its programs and ring are the pins this agent would adopt or
        // take over: two agents would read one ring, and its links would
        // never go.
        anyhow::bail!(
            "an agent answers on {}: stop it first (SIGTERM; with --persist its probes stay pinned), then \
             start this one to adopt or take over its state",
            args.socket.display()
        );
    }
    // With --persist, a stop that comes while the agent starts (a
    // takeover under way) waits until the start is complete; without, the
    // kernel undoes a killed start by itself.
    let early = args.persist.then(event_loop::Signals::install).transpose()?;
    let libs = discover::libraries(&args.libcuda, &args.libnvml, args.require_libcuda)?;
    crate::start_phases::done("finding the libraries");
    if !libs.has(Library::Cuda) {
        if args.rescan_every().is_none() {
            anyhow::bail!(
                "{}; with --rescan 0 nothing would look for one: give --libcuda PATH of an installed driver, or \
                 a --rescan period",
                discover::DiscoverError::NotFound { dirs: discover::SEARCH_DIRS.join(", ") }
            );
        }
        tracing::warn!("{}", discover::waiting_for(&args.libcuda));
    }
    let sink = setup::open_sink(args.output.as_deref(), args.format)?;
    // Held until the agent ends: no other agent or detach changes the pins
    // meanwhile (declared before the state, so dropped after it).
    let root = args.persist.then(|| persist::lock::take(&args.pin_dir)).transpose()?;
    let pinned_before = persist::pinned(&args.pin_dir);
    let mut state = match start(&args, root.as_ref(), &libs, sink) {
        Ok(s) => s,
        Err(e) => {
            if args.persist && !pinned_before {
                // Nothing half-pinned stays behind a failed start.
                let _ = persist::remove(&args.pin_dir);
            }
            return Err(e);
        }
    };
    // What parsing the kernel's BTF and the object left freed.
    memory::give_back_freed();
    let mut signals = match early {
        Some(s) => s,
        None => event_loop::Signals::install()?,
    };
    let result = match signals.stop_requested().await {
        true => {
            tracing::info!("a stop came while the agent started: it stops now that the start is complete");
            Ok(())
        }
        false => event_loop::run(&mut state, &args, signals).await,
    };
    let _ = std::fs::remove_file(&args.socket);
    result?;
    stop(state, &args)
}

/// The agent's end, once its loop has stopped: with --persist the
/// programs stay, and what the ring held when the stop came is read for at
/// most a second (a producer faster than the agent cannot keep it from
/// stopping); the rest waits in the pinned ring for the next agent.
/// Without, the programs go first, then everything left is read.
fn stop(mut state: event_loop::State, args: &RunArgs) -> anyhow::Result<()> {
    state.drain.stop();
    // A takeover still waiting for calls in flight ends now, as the next
    // agent would end it.
    if let Some(took) = state.tracer.finish_takeover(true)? {
        setup::say_took_over(&took);
    }
    match state.tracer.pins() {
        Some(_) => {
            let (ring, agent) = (state.ring.get_mut(), &mut state.agent);
            event_loop::drain_at_most(ring, agent, args.ring_buffer, event_loop::LAST_READ)?;
        }
        None => {
            state.tracer.detach_all();
            event_loop::drain(state.ring.get_mut(), &mut state.agent)?;
        }
    }
    let tracer = &state.tracer;
    state
        .agent
        .check_health(|gone| tracer.release_gone(gone), |dead| tracer.forget_dead(dead))
        .context("writing records")?;
    state.agent.stop_holding().context("writing records")?;
    state.agent.write_usage().context("writing the final usage records")?;
    match state.tracer.pins() {
        Some(pins) => tracing::info!(
            "left attached: {} library file(s) and the maps pinned at {}; the kernel goes on counting and \
             enforcing, `gpumem run --persist` adopts it, `gpumem detach` removes it",
            pins.libraries(),
            pins.dir().display()
        ),
        None => {
            drop(state);
            tracing::info!("detached");
        }
    }
    Ok(())
}

/// Everything before the event loop. With --persist, an earlier agent's
/// pins of this build are adopted: the ledger starts from the kernel's live
/// allocations, the limits from its rules and their usage.
fn start(
    args: &RunArgs,
    root: Option<&RootLock>,
    libs: &LibrarySet,
    sink: Records,
) -> anyhow::Result<event_loop::State> {
    let (mut tracer, deny_reason) = setup::open_tracer(args, root)?;
    if let Some(why) = tracer.view_refusal() {
        tracing::info!(
            "limited processes see the card as it is (view=limit is unavailable, libnvidia-ml is not \
             attached): {why}"
        );
    }
    let bpf_log = args.bpf_log.then(|| tracer.take_log()).transpose()?;
    // The programs' log is drained on the drain timer: with it, the timer
    // never stops.
    let marks = match args.bpf_log {
        true => None,
        false => Some(crate::bpf::wake::WakeMarks::take(&mut tracer)?),
    };
    let (kernel, hashed) = KernelMaps::take(&mut tracer)?;
    let adopted = tracer.pins().is_some_and(|p| p.adopted());
    let held = match adopted {
        true => kernel.held(),
        false => Vec::new(),
    };
    let ledger = match adopted {
        true => Ledger::adopted(&held, monotonic_ns()),
        false => Ledger::default(),
    };
    let limits = setup::limits(args, &mut tracer, deny_reason, adopted, (&ledger, &held))?;
    if let Some(pins) = tracer.pins().filter(|p| p.adopted()) {
        let procs = ledger.processes();
        let whose = pins.predecessor().map_or(String::new(), |b| format!(" of build {b}"));
        tracing::info!(
            "adopted the gpumem state{whose} pinned at {}: {} live allocation(s) of {} process(es), {} limit(s)",
            pins.predecessor().map_or(pins.dir().to_path_buf(), |b| pins.dir().with_file_name(b)).display(),
            procs.iter().map(|(_, p)| p.live_count()).sum::<usize>(),
            procs.len(),
            limits.list().len()
        );
    }
    crate::start_phases::done("the kernel's maps taken, the limits installed");
    let attached = attach_all(&mut tracer, libs)?;
    crate::start_phases::done("attaching");
    match tracer.complete_takeover()? {
        Some(Completion::Done(took)) => setup::say_took_over(&took),
        Some(Completion::Waiting { left, threads }) => tracing::info!(
            "this build runs; the old build's pins stay until {left} call(s) in flight since before this \
             build's return probes were attached have returned ({threads}), at most {} s",
            crate::bpf::handover::WAIT_AT_MOST.as_secs()
        ),
        None => {}
    }
    let ring =
        Ring::new(tracer.take_any_map(map_name::EVENTS)?).context("reading the records' ring buffer")?;
    // SAFETY: the Ring owns its map fd, which stays open and unchanged
    // until the AsyncFd (which owns the Ring) is dropped.
    let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("watching the ring buffer: {e}"))?;
    let agent = Agent::new(sink, (kernel, hashed), limits, ledger, &attached);
    let drain = idle::DrainTimer::new(marks);
    Ok(event_loop::State { agent, tracer, ring, bpf_log, rescan: Default::default(), drain })
}

/// Attaches (or adopts) every library found at start-up.
fn attach_all(tracer: &mut Tracer, libs: &LibrarySet) -> anyhow::Result<Vec<AttachReport>> {
    let mut attached = Vec::new();
    for lib in &libs.libs {
        if !tracer.serves(lib.kind) {
            continue;
        }
        let report = match tracer.attach(lib) {
            Ok(r) => r,
            // NVML serves only the view: the agent runs on without it.
            Err(e) if lib.kind == Library::Nvml => {
                tracing::warn!(
                    "not attaching to {}: {}; processes using it are told the card as it is by NVML",
                    lib.path.display(),
                    crate::chain(&e)
                );
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        setup::say_attached(&report);
        attached.push(report);
    }
    Ok(attached)
}
