//! `gpumem run`'s event loop: records from the ring buffer, requests from
//! the control socket, signals and timers, each handled by the agent in
//! turn (one task: no locks).
use std::time::Duration;

use anyhow::Context;
use tokio::{
    io::unix::{AsyncFd, AsyncFdReadyMutGuard},
    signal::unix::{signal, Signal, SignalKind},
    sync::mpsc,
    task::JoinHandle,
};

use super::{idle::DrainTimer, setup};
use crate::{
    agent::Agent,
    bpf::{log::BpfLog, rescan::Rescan, ring::Ring, Tracer},
    cli::RunArgs,
    control,
    metrics::{encode::encode, server::ScrapeRequest},
    stop_at,
};

/// The longest the loop reads records before it looks at signals,
/// requests and timers again.
const TURN: Duration = Duration::from_millis(50);
/// The longest a `--persist` agent that stops reads what is left in the
/// ring (the rest waits there for the next agent).
pub const LAST_READ: Duration = Duration::from_secs(1);
/// How often the health step runs.
const HEALTH_EVERY: Duration = Duration::from_secs(1);

/// What the loop works on.
pub struct State {
    pub agent: Agent,
    pub tracer: Tracer,
    pub ring: AsyncFd<Ring>,
    /// The programs' log, with `--bpf-log`.
    pub bpf_log: Option<BpfLog>,
    /// What the rescan looked at, and the library files that could not
    /// be attached (said once).
    pub rescan: Rescan,
    /// When the ring is drained without a request: every `DRAIN_EVERY`,
    /// or at a record's wake-up while idle.
    pub drain: DrainTimer,
}

impl State {
    /// The agent, once it has applied every record in the ring (of `ring`
    /// bytes).
    fn drained(&mut self, ring: u32) -> anyhow::Result<&mut Agent> {
        let read = drain_at_most(self.ring.get_mut(), &mut self.agent, ring, Duration::MAX)?;
        self.drain.read(read.records, false, &mut self.agent);
        self.agent.saw_ring_unread(self.ring.get_ref().unread() as u64);
        Ok(&mut self.agent)
    }

    /// The health step's drain while idle: what raced the marks (see
    /// idle.rs), or, where the ring's wake-up came in the same poll as
    /// the step's tick and `select!` chose the tick, what woke the agent,
    /// read as its wake-up (counted in `idle_wakes`).
    fn idle_health(&mut self, ring: u32) -> anyhow::Result<()> {
        use futures_util::FutureExt;
        match self.ring.readable_mut().now_or_never() {
            Some(guard) => {
                let mut guard = guard.context("waiting on the ring buffer")?;
                woken(&mut guard, &mut self.agent, &mut self.drain, ring)
            }
            None => self.drained(ring).map(drop),
        }
    }

    /// A drain timer's tick: reads for at most `TURN`, and goes idle after
    /// enough ticks that read nothing (see idle.rs).
    fn on_tick(&mut self, ring: u32) -> anyhow::Result<()> {
        let read = drain_at_most(self.ring.get_mut(), &mut self.agent, ring, TURN)?;
        self.drain.read(read.records, false, &mut self.agent);
        if read.bounded {
            // More is waiting: the next turn comes at once (after signals
            // and requests), not a tick later.
            self.drain.reset_immediately();
        }
        if read.records == 0 && self.drain.quiet_tick() && self.drain.mark() {
            // A record that looked at the backlog before its CPU's mark did
            // not wake the agent: read what came meanwhile.
            let read = drain_at_most(self.ring.get_mut(), &mut self.agent, ring, TURN)?;
            self.drain.settle(read.records, &mut self.agent);
        }
        if let Some(log) = self.bpf_log.as_mut() {
            log.drain();
        }
        Ok(())
    }
}

/// The drain the ring's wake-up asked for (through `guard`, its readiness
/// then cleared): for at most `TURN`, the rest at the timer's next turn,
/// at once.
fn woken(
    guard: &mut AsyncFdReadyMutGuard<'_, Ring>,
    agent: &mut Agent,
    drain: &mut DrainTimer,
    ring: u32,
) -> anyhow::Result<()> {
    let read = drain_at_most(guard.get_inner_mut(), agent, ring, TURN)?;
    guard.clear_ready();
    drain.read(read.records, true, agent);
    if read.bounded {
        drain.reset_immediately();
    }
    Ok(())
}

/// The agent's signal handlers. With `--persist` they are installed
/// before it loads anything: a SIGTERM or SIGINT that comes while it
/// starts (a takeover half done) waits until the start is complete, and it
/// then stops at once.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub fn install() -> anyhow::Result<Self> {
        let on = |kind, name| signal(kind).with_context(|| format!("installing the {name} handler"));
        Ok(Self {
            int: on(SignalKind::interrupt(), "SIGINT")?,
            term: on(SignalKind::terminate(), "SIGTERM")?,
            hup: on(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// Whether SIGINT or SIGTERM came since the handlers were installed
    /// (the runtime's signal driver first reads what came while a start
    /// kept it from running).
    pub async fn stop_requested(&mut self) -> bool {
        use futures_util::FutureExt;
        tokio::task::yield_now().await;
        let came = |s: &mut Signal| s.recv().now_or_never().is_some();
        came(&mut self.int) | came(&mut self.term)
    }
}

/// The rescan's timer, its first look at what processes have mapped (the
/// interval's first tick is immediate) taken before the agent says
/// `ready`: `ready` then means that every library mapped at the start
/// (NVML in the agent itself, too) is attached, and whoever waits for it
/// sees every link.
async fn first_rescan(s: &mut State, args: &RunArgs) -> tokio::time::Interval {
    let mut rescan = tokio::time::interval(args.rescan_every().unwrap_or(Duration::from_secs(3600)));
    rescan.tick().await;
    if args.rescan_every().is_some() {
        setup::attach_new(&mut s.tracer, &mut s.agent, &mut s.rescan, &args.libcuda);
    }
    crate::start_phases::done("the servers and the first rescan");
    rescan
}

/// Runs until SIGINT, SIGTERM or the end of `--duration`.
pub async fn run(s: &mut State, args: &RunArgs, mut signals: Signals) -> anyhow::Result<()> {
    let (_servers, mut requests, mut scrapes) = Servers::start(args).await?;
    let deadline = async {
        match args.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut health = tokio::time::interval(HEALTH_EVERY);
    let mut rescan = first_rescan(s, args).await;
    let mut usage = tokio::time::interval(args.interval.unwrap_or(Duration::from_secs(3600)));
    usage.tick().await; // the first tick is immediate; usage starts one interval in
    tracing::info!("control socket {}", args.socket.display());
    tracing::info!("ready");
    // Each turn reads at most what the ring holds when full (all it held
    // when the turn began), and the ring's own wake-ups and the timer for
    // at most TURN, so that a producer faster than the agent cannot keep
    // signals and requests waiting; a turn cut short makes the timer fire
    // at once for the rest, so an agent behind reads without pause.
    let ring = args.ring_buffer;
    let result: anyhow::Result<()> = async {
        loop {
            tokio::select! {
                guard = s.ring.readable_mut() => {
                    let mut guard = guard.context("waiting on the ring buffer")?;
                    woken(&mut guard, &mut s.agent, &mut s.drain, ring)?;
                }
                // Each of these first applies everything already in the
                // ring: a status, page or usage line taken after a
                // workload's calls returned includes them, and a rule set
                // by SIGHUP carries all its target holds.
                Some((request, reply)) = requests.recv() => {
                    let _ = reply.send(s.drained(ring)?.answer(request));
                }
                Some(page) = scrapes.recv() => {
                    let _ = page.send(encode(&s.drained(ring)?.scrape()).map_err(|e| format!("encoding the page: {e}")));
                }
                _ = signals.hup.recv() => reload(s.drained(ring)?, args),
                _ = s.drain.tick() => s.on_tick(ring)?,
                _ = health.tick() => {
                    if s.drain.idle() {
                        s.idle_health(ring)?;
                    }
                    if s.tracer.standing_down() {
                        if let Some(took) = s.tracer.finish_takeover(false)? {
                            setup::say_took_over(&took);
                        }
                    }
                    let tracer = &s.tracer;
                    s.agent
                        .check_health(|gone| tracer.release_gone(gone), |dead| tracer.forget_dead(dead))
                        .context("writing records")?;
                }
                _ = rescan.tick(), if args.rescan_every().is_some() => setup::attach_new(&mut s.tracer, &mut s.agent, &mut s.rescan, &args.libcuda),
                _ = usage.tick(), if args.interval.is_some() => s.drained(ring)?.write_usage().context("writing records")?,
                _ = signals.int.recv() => break,
                _ = signals.term.recv() => break,
                _ = &mut deadline => break,
            }
        }
        Ok(())
    }
    .await;
    result
}

/// The control socket's server and the metrics' (with `--metrics`), which
/// hand their requests to the loop; stopped when dropped.
struct Servers(Vec<JoinHandle<()>>);

impl Servers {
    async fn start(
        args: &RunArgs,
    ) -> anyhow::Result<(Self, mpsc::Receiver<control::Incoming>, mpsc::Receiver<ScrapeRequest>)> {
        let (req_tx, requests) = mpsc::channel(16);
        let mut servers = Self(vec![control::serve(&args.socket, req_tx).await?]);
        let (scrape_tx, scrapes) = mpsc::channel(16);
        if let Some(addr) = args.metrics {
            let (task, bound) = crate::metrics::server::serve(addr, scrape_tx).await?;
            tracing::info!("metrics at http://{bound}/metrics");
            servers.0.push(task);
        }
        Ok((servers, requests, scrapes))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Applies every record waiting in the ring buffer, then makes them
/// visible to readers.
pub fn drain(ring: &mut Ring, agent: &mut Agent) -> anyhow::Result<()> {
    drain_at_most(ring, agent, u32::MAX, Duration::MAX).map(drop)
}

/// What [`drain_at_most`] read.
pub struct Read {
    /// It stopped at a bound, records perhaps still waiting.
    pub bounded: bool,
    pub records: u64,
}

/// How many bytes of records are read between two commits (an eighth of
/// a smaller ring): what was read is written out, then its space given
/// back to the kernel's producers.
const COMMIT_EVERY: usize = 64 << 10;

/// [`drain`], reading at most `bytes` of records (headers counted: all
/// that a ring of that size held when called) and for at most `time`. The
/// ring is told a record was read only once its line is written (see
/// `bpf/ring.rs`): an agent killed meanwhile leaves it to its successor.
pub fn drain_at_most(ring: &mut Ring, agent: &mut Agent, bytes: u32, time: Duration) -> anyhow::Result<Read> {
    let started = std::time::Instant::now();
    let every = COMMIT_EVERY.min(ring.size() / 8);
    let (mut read, mut records, mut clock_at, mut commit_at) = (0usize, 0u64, 0usize, every);
    let bounded = loop {
        if read >= bytes as usize {
            break true;
        }
        if read >= commit_at {
            written(ring, agent)?;
            commit_at = read + every;
        }
        if read >= clock_at {
            if started.elapsed() >= time {
                break true;
            }
            clock_at = read + (16 << 10); // the clock every 16 KiB of records
        }
        let Some(item) = ring.next_record() else { break false };
        read += item.len() + 8;
        records += 1;
        agent.on_bytes(item).context("writing records")?;
    };
    if records > 0 && stop_at::armed("read") {
        let what = format!(": {records} record(s) read, {} bytes not given back", ring.uncommitted());
        stop_at::stop_at("read", &what);
    }
    written(ring, agent)?;
    Ok(Read { bounded, records })
}

/// Writes out what the agent formatted, then gives the records it came
/// from back to the kernel. A write that fails for want of space still
/// gives them back: their lines wait in the sink or are counted lost.
fn written(ring: &mut Ring, agent: &mut Agent) -> anyhow::Result<()> {
    agent.flush().context("writing records")?;
    ring.commit();
    Ok(())
}

/// SIGHUP: reads --config again and applies the difference.
fn reload(agent: &mut Agent, args: &RunArgs) {
    let Some(path) = args.config.as_deref() else {
        tracing::warn!("SIGHUP: no --config to reload; nothing changed");
        return;
    };
    match setup::policy(args) {
        Ok(policy) => agent.reload(&policy),
        Err(e) => tracing::warn!("SIGHUP: {} not reloaded, the limits in force stay: {e:#}", path.display()),
    }
}
