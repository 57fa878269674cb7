//! `gpumem run`: find libcuda, load and attach (`setup.rs`), then run the
//! event loop (`event_loop.rs`) until told to stop, and detach.
mod event_loop;
mod setup;

use anyhow::Context;
use aya::maps::{MapData, RingBuf};
use gpumem_common::map_name;
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    agent::Agent,
    bpf::{discover, kernel::KernelMaps, probes::Library},
    cli::RunArgs,
    limits::{describe, Limits},
    privileges,
};

/// The line (on stderr) tests and scripts wait for before they start a
/// workload: the log line of the message `ready`.
pub const READY: &str = "gpumem: ready";

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    privileges::check()?;
    setup::raise_memlock();
    let libs = discover::libraries(&args.libcuda, &args.libnvml)?;
    let sink = setup::open_sink(args.output.as_deref(), args.format)?;
    let (mut tracer, deny_reason) = setup::open_tracer(&args)?;
    if let Some(why) = tracer.view_refusal() {
        tracing::info!(
            "limited processes see the card as it is (view=limit is unavailable, libnvidia-ml is not \
             attached): {why}"
        );
    }
    let bpf_log = args.bpf_log.then(|| tracer.take_log()).transpose()?;
    let policy = setup::policy(&args)?;
    let (limits, installed) = Limits::install(&mut tracer, &policy, setup::cgroup_root(), deny_reason)?;
    for i in &installed {
        tracing::info!("{}", describe("limit", i));
    }
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
    let ring: RingBuf<MapData> = tracer.take_map(map_name::EVENTS)?;
    // SAFETY: the RingBuf owns its map fd, which stays open and unchanged
    // until the AsyncFd (which owns the RingBuf) is dropped.
    let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("watching the ring buffer: {e}"))?;
    let kernel = KernelMaps::take(&mut tracer)?;
    let agent = Agent::new(sink, kernel, limits, &attached);
    let mut state = event_loop::State { agent, tracer, ring, bpf_log, rejected: Default::default() };
    let result = event_loop::run(&mut state, &args).await;
    let _ = std::fs::remove_file(&args.socket);
    result?;
    event_loop::drain(state.ring.get_mut(), &mut state.agent)?;
    state.agent.check_health(|tgid| state.tracer.release_gone(tgid)).context("writing records")?;
    state.agent.write_usage().context("writing the final usage records")?;
    state.tracer.detach_all();
    drop(state);
    tracing::info!("detached");
    Ok(())
}
