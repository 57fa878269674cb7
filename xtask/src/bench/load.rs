//! The agent under load: its CPU (% of one core) and peak RSS idle, while
//! the probes produce 1k and 10k records per second, at saturation (every core
//! allocating, one process per core) and with many allocations held; and
//! whether every record the probes produced reached it or was counted lost.
use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};

use super::{
    pod::BenchPod,
    setup::{workload_in, Built},
    tracer::Tracer,
};
use crate::util::output;

/// One measured load.
#[derive(Debug, serde::Serialize)]
pub struct LoadRow {
    pub load: String,
    /// Records per second the probes produced (alloc and free records).
    pub events_per_s: f64,
    /// Agent CPU time over the load's wall time, in % of one core.
    pub agent_cpu_pct: f64,
    /// The agent's peak resident memory during the load.
    pub agent_peak_rss_mb: f64,
    /// Of that peak, what the agent allocated: less its mapped files and
    /// the ring buffer's mapping (see [`peak_allocated_mb`]).
    pub agent_peak_allocated_mb: f64,
    /// Records the kernel counted lost (the ring buffer full) during the
    /// load.
    pub records_lost: u64,
    /// Records the agent applied during the load.
    pub records_delivered: u64,
    /// The agent's CPU time over the load (all its threads), in ms.
    pub agent_cpu_ms: f64,
}

impl LoadRow {
    /// The agent's CPU time per record it applied, in µs: what a record
    /// read costs it, whatever the kernel lost (a starved agent's time
    /// over the records produced would understate it); None with none
    /// applied (idle).
    pub fn cpu_us_per_record_delivered(&self) -> Option<f64> {
        (self.records_delivered > 0).then(|| self.agent_cpu_ms * 1e3 / self.records_delivered as f64)
    }
}

#[derive(Debug)]
pub struct AgentLoad {
    pub rows: Vec<LoadRow>,
    pub saturation_events_per_s: f64,
    /// Records the kernel counted lost (ring buffer full) over all loads.
    pub lost_records: u64,
    /// Records produced by the workloads (2 per alloc+free pair).
    pub produced_records: u64,
    /// Records the agent applied.
    pub delivered_records: u64,
    pub agent_rss_mb_100k_live: f64,
    pub agent_allocated_mb_100k_live: f64,
    /// The ring buffer's pages resident in the agent (mapped twice).
    pub ring_mapped_mb: f64,
    pub live_allocations: usize,
}

/// The agent's counters, from `gpumem status --json`.
fn counters(b: &Built, socket: &Path) -> anyhow::Result<(u64, u64)> {
    let text = output(Command::new(&b.agent).args(["status", "--json", "--socket"]).arg(socket))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("gpumem status --json")?;
    Ok((v["records"].as_u64().unwrap_or(0), v["dropped"].as_u64().unwrap_or(0)))
}

/// Waits until the agent has applied, or the kernel counted lost, `n`
/// records since `since` (the counters then); returns both counts.
fn wait_for_records(
    b: &Built,
    socket: &Path,
    since: (u64, u64),
    n: u64,
    load: &str,
) -> anyhow::Result<(u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (r, l) = counters(b, socket)?;
        let (r, l) = (r - since.0, l - since.1);
        if r + l >= n {
            return Ok((r, l));
        }
        if Instant::now() > deadline {
            bail!("{load}: after 120 s the agent has applied {r} records and the kernel lost {l}, of {n} produced");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the agent says it is idle (`gpumem status --json`'s
/// `idle`: its drain timer stopped after a second without a record), so
/// that the idle load measures an agent at rest, not its first second; a
/// build whose status has no `idle` (before db629ad) at once.
fn wait_until_idle(b: &Built, socket: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = output(Command::new(&b.agent).args(["status", "--json", "--socket"]).arg(socket))?;
        let v: serde_json::Value = serde_json::from_str(&text).context("gpumem status --json")?;
        match v.get("idle").map(serde_json::Value::as_bool) {
            None | Some(Some(true)) => return Ok(()),
            _ if Instant::now() > deadline => bail!("after 30 s with nothing to read the agent is not idle"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// CPU time of process `pid` so far, in ns: its process CPU clock
/// (`clock_getcpuclockid`), which counts every thread, those that have
/// exited too (the sweep's thread ends after each walk; a sum over the
/// threads alive at each read missed it); 0 where it cannot be read.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(clock) = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(pid as i32)) else { return 0 };
    nix::time::clock_gettime(clock).map_or(0, |t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// The agent's peak resident size (`VmHWM`) in MB.
fn peak_rss_mb(pid: u32) -> f64 {
    let status = procfs::process::Process::new(pid as i32).and_then(|p| p.status());
    status.ok().and_then(|s| s.vmhwm).map_or(0.0, |kb| kb as f64 / 1024.0)
}

/// The agent's peak RSS less what is mapped from files and shared: what it
/// allocated at its peak. The kernel counts the ring buffer's mapping as a
/// file's (`RssFile`), and that part, with the binary's and libraries'
/// pages, hardly changes once the agent runs.
fn peak_allocated_mb(pid: u32) -> f64 {
    let status = procfs::process::Process::new(pid as i32).and_then(|p| p.status());
    let Ok(s) = status else { return 0.0 };
    let mapped = s.rssfile.unwrap_or(0) + s.rssshmem.unwrap_or(0);
    s.vmhwm.map_or(0.0, |kb| kb.saturating_sub(mapped) as f64 / 1024.0)
}

/// The ring buffer's resident pages in the agent (`smaps`: the mapping of
/// its map, `anon_inode:bpf-map`), in MB.
fn ring_mapped_mb(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut ring, mut kb) = (false, 0u64);
    for line in text.lines() {
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["Rss:", n, "kB"] if ring => kb += n.parse::<u64>().unwrap_or(0),
            [range, ..] if range.contains('-') && !range.ends_with(':') => {
                ring = line.ends_with("anon_inode:bpf-map")
            }
            _ => {}
        }
    }
    kb as f64 / 1024.0
}

/// Starts a new peak for `VmHWM` (proc(5), clear_refs "5").
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Measures one load: runs `start` (which returns the records its
/// workloads will produce and a way to wait for them), then waits for the
/// agent to have every record applied or counted lost.
struct Meter<'a> {
    b: &'a Built,
    socket: &'a Path,
    pid: u32,
    lost: u64,
    produced: u64,
    delivered: u64,
}

impl Meter<'_> {
    fn measure(&mut self, load: &str, run: impl FnOnce() -> anyhow::Result<u64>) -> anyhow::Result<LoadRow> {
        let (records0, lost0) = counters(self.b, self.socket)?;
        reset_peak(self.pid);
        let (cpu0, t0) = (cpu_ns(self.pid), Instant::now());
        let produced = run()?;
        let produce_time = t0.elapsed();
        let (records, lost) = wait_for_records(self.b, self.socket, (records0, lost0), produced, load)?;
        let (wall, cpu) = (t0.elapsed(), cpu_ns(self.pid).saturating_sub(cpu0));
        self.lost += lost;
        self.produced += produced;
        self.delivered += records;
        let row = LoadRow {
            load: load.to_string(),
            events_per_s: produced as f64 / produce_time.as_secs_f64(),
            agent_cpu_pct: cpu as f64 / wall.as_nanos() as f64 * 100.0,
            agent_peak_rss_mb: peak_rss_mb(self.pid),
            agent_peak_allocated_mb: peak_allocated_mb(self.pid),
            records_lost: lost,
            records_delivered: records,
            agent_cpu_ms: cpu as f64 / 1e6,
        };
        eprintln!("xtask: bench {load}: {row:?}, {lost} of {produced} records lost");
        Ok(row)
    }
}

fn loop_cmd(b: &Built, pairs: u64, rate: u64) -> Command {
    loop_args(Command::new(&b.workload), b, pairs, rate)
}

/// [`loop_cmd`] in cgroup `dir`.
fn loop_cmd_in(b: &Built, pairs: u64, dir: &Path) -> Command {
    loop_args(workload_in(b, dir), b, pairs, 0)
}

fn loop_args(mut c: Command, b: &Built, pairs: u64, rate: u64) -> Command {
    c.arg("--libcuda").arg(&b.libcuda).args(["--scenario", "loop", "--size", "4096"]);
    c.args(["--iterations", &pairs.to_string(), "--rate", &rate.to_string()]);
    c.stdout(Stdio::null());
    c
}

fn run_all(mut cmds: Vec<Command>) -> anyhow::Result<()> {
    let children =
        cmds.iter_mut().map(|c| c.spawn().context("starting a workload")).collect::<Result<Vec<_>, _>>()?;
    for mut child in children {
        let status = child.wait()?;
        if !status.success() {
            bail!("a bench workload failed: {status}");
        }
    }
    Ok(())
}

/// Runs every load against one agent.
pub fn measure(b: &Built, quick: bool) -> anyhow::Result<AgentLoad> {
    let socket = b.out.join("load.sock");
    let mut c = Command::new(&b.agent);
    c.arg("run").arg("--libcuda").arg(&b.libcuda).arg("--output").arg(b.out.join("load.jsonl"));
    c.arg("--socket").arg(&socket).args(["--rescan", "0"]);
    let (agent, _) = Tracer::start(c, "gpumem: ready")?;
    let pid = agent.pid().context("the agent is not running")?;
    let mut m = Meter { b, socket: &socket, pid, lost: 0, produced: 0, delivered: 0 };
    let seconds = if quick { 3 } else { 10 };
    let mut rows = Vec::new();
    // What the agent costs with nothing to read: its timers alone.
    wait_until_idle(b, &socket)?;
    let idle = Duration::from_secs(seconds);
    rows.push(m.measure("idle", || {
        std::thread::sleep(idle);
        Ok(0)
    })?);
    for (load, pairs_per_s) in [("1k/s", 500), ("10k/s", 5_000)] {
        let pairs = pairs_per_s * seconds;
        let row = m.measure(load, || {
            run_all(vec![loop_cmd(b, pairs, pairs_per_s)])?;
            Ok(2 * pairs)
        })?;
        rows.push(row);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let pairs = if quick { 50_000 } else { 200_000 };
    let row = m.measure("saturation", || {
        run_all((0..cores).map(|_| loop_cmd(b, pairs, 0)).collect())?;
        Ok(2 * pairs * cores)
    })?;
    let saturation_events_per_s = row.events_per_s;
    rows.push(row);
    // The same loops in a pod's container: each record names the
    // container and its pod.
    let pod = BenchPod::make()?;
    rows.push(m.measure(IN_A_POD, || {
        run_all((0..cores).map(|_| loop_cmd_in(b, pairs, pod.cgroup())).collect())?;
        Ok(2 * pairs * cores)
    })?);
    drop(pod);
    let live = 100_000;
    let row = m.measure("100k live", || hold(b, &socket, live, Duration::ZERO))?;
    let (agent_rss_mb_100k_live, agent_allocated_mb_100k_live) =
        (row.agent_peak_rss_mb, row.agent_peak_allocated_mb);
    rows.push(row);
    // The same, with processes exiting beside it: the agent sweeps what
    // exits leave, and walks the 100k's spill in the hash map each time.
    rows.push(m.measure("100k live, exits", || hold(b, &socket, live, EXITS_BESIDE))?);
    let ring_mapped_mb = ring_mapped_mb(pid);
    drop(agent);
    let _ = std::fs::remove_file(b.out.join("load.jsonl"));
    Ok(AgentLoad {
        rows,
        saturation_events_per_s,
        lost_records: m.lost,
        produced_records: m.produced,
        delivered_records: m.delivered,
        agent_rss_mb_100k_live,
        agent_allocated_mb_100k_live,
        ring_mapped_mb,
        live_allocations: live,
    })
}

/// The load of [`BenchPod`]'s loops, at saturation.
const IN_A_POD: &str = "saturation, in a pod";

/// How long the `100k live, exits` load runs short loops beside the held
/// allocations: more than two of the agent's sweeps (at most one every
/// 5 s, after exits).
pub const EXITS_BESIDE: Duration = Duration::from_secs(12);

/// Loops of [`EXIT_PAIRS`] pairs, one after another, for `beside`; the
/// records they produced.
fn exits_beside(b: &Built, beside: Duration) -> anyhow::Result<u64> {
    let (start, mut records) = (Instant::now(), 0);
    while start.elapsed() < beside {
        run_all(vec![loop_cmd(b, EXIT_PAIRS, 0)])?;
        records += 2 * EXIT_PAIRS;
    }
    Ok(records)
}

/// Pairs each process of [`exits_beside`] runs before it exits.
const EXIT_PAIRS: u64 = 20_000;

/// `live` allocations held until the agent has them all in its ledger,
/// while short loops run `beside` them (none for a zero), then freed;
/// returns the records produced.
fn hold(b: &Built, socket: &Path, live: usize, beside: Duration) -> anyhow::Result<u64> {
    let (records0, lost0) = counters(b, socket)?;
    let mut c = Command::new(&b.workload);
    c.arg("--libcuda").arg(&b.libcuda).args(["--scenario", "hold", "--size", "4096", "--pause"]);
    c.args(["--iterations", &live.to_string()]);
    let mut child =
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().context("starting the hold workload")?;
    let mut stdin = child.stdin.take().context("workload stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("workload stdout")?).lines();
    let mut extra = 0;
    for checkpoint in ["held", "freed"] {
        let line = lines.next().context("the hold workload ended early")??;
        if !line.contains(&format!("\"{checkpoint}\"")) {
            bail!("the hold workload printed `{line}`, expected checkpoint {checkpoint}");
        }
        if checkpoint == "held" {
            wait_for_records(b, socket, (records0, lost0), live as u64, "100k live")?;
            extra = exits_beside(b, beside)?;
        }
        writeln!(stdin)?;
    }
    drop(stdin);
    let status = child.wait()?;
    if !status.success() {
        bail!("the hold workload failed: {status}");
    }
    Ok(2 * live as u64 + extra)
}
