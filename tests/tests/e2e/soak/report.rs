//! The soak's report: every round as it went (JSON, rewritten after each
//! round, so a failed soak leaves what it did up to the failure), the
//! totals, the agents' memory and CPU, and the bounds the soak holds them
//! to.
use std::{path::Path, time::Duration};

use serde::Serialize;

use super::{agents::Health, round::RoundReport};

/// Growth of the agent's anonymous memory allowed after the warm-up.
const GROWTH_KIB: u64 = 1024;
/// The warm-up: five minutes, or a third of a shorter soak.
const WARM_UP_S: u64 = 300;

#[derive(Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub seconds: u64,
    pub round_seconds: u64,
    /// Whether a container ran each round (podman present).
    pub containers: bool,
    pub totals: Option<Totals>,
    pub rounds: Vec<RoundReport>,
}

#[derive(Debug, Serialize)]
pub struct Totals {
    pub elapsed_s: u64,
    pub rounds: usize,
    pub processes: usize,
    pub calls: u64,
    pub refused: u64,
    pub killed_by_limit: usize,
    pub compared: usize,
    pub agents: u32,
    pub outages: Vec<(String, usize)>,
    pub lines_read: u64,
    pub unwritten: u64,
    pub calls_without_record: u64,
    pub health: Health,
    /// After the warm-up (the soak's, and each agent's own first two
    /// rounds), the most any one agent's anonymous memory grew from its
    /// first sample (KiB); the range of those samples.
    pub warm_up_s: u64,
    /// None where no agent lived long enough to be measured (a short
    /// soak replaces it every round).
    pub rss_anon_growth_kib: Option<u64>,
    pub rss_anon_kib: (u64, u64),
    pub rss_kib_max: u64,
    /// The agent's CPU in its busiest round, percent of one core.
    pub cpu_percent_max: f64,
}

impl Report {
    pub fn new(seed: u64, seconds: u64, round: Duration, containers: bool) -> Self {
        Self { seed, seconds, round_seconds: round.as_secs(), containers, totals: None, rounds: Vec::new() }
    }

    pub fn write(&self, path: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        let text = serde_json::to_string_pretty(self).expect("the report serializes");
        std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    pub fn finish(&mut self, health: Health, lines_read: u64, elapsed: Duration) {
        let r = &self.rounds;
        let sum = |f: fn(&RoundReport) -> u64| r.iter().map(f).sum::<u64>();
        let warm_up_s = WARM_UP_S.min(elapsed.as_secs() / 3);
        let mut outages = std::collections::BTreeMap::<String, usize>::new();
        for e in r.iter().flat_map(|r| &r.events) {
            for kind in [
                "SIGSTOPped",
                "Takeover",
                "Killed",
                "Restart",
                "disk full",
                "victim SIGKILLed",
                "rewritten",
                "cleared",
                "raised",
            ] {
                if e.contains(kind) {
                    *outages.entry(kind.to_string()).or_default() += 1;
                }
            }
        }
        let (growth, cpu) = per_agent(r, warm_up_s);
        let anon = r.iter().filter(|x| x.started_s >= warm_up_s).map(|x| x.agent_rss_anon_kib);
        self.totals = Some(Totals {
            elapsed_s: elapsed.as_secs(),
            rounds: r.len(),
            processes: r.iter().map(|x| x.processes).sum(),
            calls: sum(|x| x.calls),
            refused: sum(|x| x.refused),
            killed_by_limit: r.iter().map(|x| x.killed_by_limit).sum(),
            compared: r.iter().map(|x| x.compared).sum(),
            agents: health.agents,
            outages: outages.into_iter().collect(),
            lines_read,
            unwritten: sum(|x| x.unwritten),
            calls_without_record: sum(|x| x.calls_without_record),
            health,
            warm_up_s,
            rss_anon_growth_kib: growth,
            rss_anon_kib: (anon.clone().min().unwrap_or(0), anon.max().unwrap_or(0)),
            rss_kib_max: r.iter().map(|x| x.agent_rss_kib).max().unwrap_or(0),
            cpu_percent_max: cpu,
        });
    }

    pub fn summary(&self) -> String {
        let t = self.totals.as_ref().expect("finished");
        format!(
            "soak: {} s, {} rounds, seed {}: {} processes, {} calls ({} refused), {} killed by a limit, \
             {} comparisons exact, 0 hard limits passed; {} agents ({:?}); {} lines read, {} unwritten \
             (a full disk, {} of them calls, counted); lost in the kernel {}, returns without entry {}, \
             runs skipped {}; agent anonymous memory {:?} KiB after {} s, growth {}; RSS at most {} KiB; \
             CPU at most {:.1}% of a core",
            t.elapsed_s,
            t.rounds,
            self.seed,
            t.processes,
            t.calls,
            t.refused,
            t.killed_by_limit,
            t.compared,
            t.agents,
            t.outages,
            t.lines_read,
            t.unwritten,
            t.calls_without_record,
            t.health.dropped,
            t.health.unmatched_returns,
            t.health.skipped_runs,
            t.rss_anon_kib,
            t.warm_up_s,
            t.rss_anon_growth_kib
                .map_or("not measured (no agent lived four rounds past the warm-up)".into(), |g| format!(
                    "{g} KiB"
                )),
            t.rss_kib_max,
            t.cpu_percent_max
        )
    }

    /// The bounds: nothing lost in the kernel, every return matched, the
    /// agents' memory flat after the warm-up.
    pub fn assert_bounds(&self) {
        let t = self.totals.as_ref().expect("finished");
        assert_eq!((t.health.dropped, t.health.unmatched_returns), (0, 0), "{}", self.summary());
        let growth = t.rss_anon_growth_kib.unwrap_or(0);
        assert!(growth < GROWTH_KIB, "the agent's memory grew: {}", self.summary());
    }
}

/// One round as a line.
pub fn line(r: &RoundReport) -> String {
    format!(
        "round {} at {} s ({:.0} s): {} processes, {} calls, {} refused, {} killed by a limit, {} compared; \
         agent {} RssAnon {} KiB; {}",
        r.plan.round,
        r.started_s,
        r.seconds,
        r.processes,
        r.calls,
        r.refused,
        r.killed_by_limit,
        r.compared,
        r.agent,
        r.agent_rss_anon_kib,
        r.events.join("; ")
    )
}

/// Per agent, over the rounds that ended after the warm-up (the soak's,
/// and the agent's own first two rounds): the most its anonymous memory
/// grew from its first such sample; and the busiest round's CPU.
fn per_agent(rounds: &[RoundReport], warm_up_s: u64) -> (Option<u64>, f64) {
    let mut growth: Option<u64> = None;
    let mut cpu: f64 = 0.0;
    let agents: std::collections::BTreeSet<u32> = rounds.iter().map(|r| r.agent).collect();
    for a in agents {
        let mine: Vec<&RoundReport> = rounds.iter().filter(|r| r.agent == a).collect();
        // Its own first two rounds are its warm-up (its maps and buffers
        // grow to the load), then the soak's.
        let warm: Vec<&&RoundReport> = mine.iter().skip(2).filter(|r| r.started_s >= warm_up_s).collect();
        // Measured where it has two samples or more.
        if let (Some(first), true) = (warm.first(), warm.len() >= 2) {
            let max = warm.iter().map(|r| r.agent_rss_anon_kib).max().unwrap_or(0);
            growth = Some(growth.unwrap_or(0).max(max.saturating_sub(first.agent_rss_anon_kib)));
        }
    }
    for r in rounds {
        if let Some(c) = r.agent_cpu_percent {
            cpu = cpu.max(c);
        }
    }
    (growth, cpu)
}
