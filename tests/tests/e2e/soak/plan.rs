//! What each round of the soak does, drawn from its seed: the limits, the
//! agent's outage and when, the full disk, the process killed. Every
//! round draws the same way from `seed + round`, so a failing round can
//! be run again alone (`GPUMEM_SOAK_SEED`).
use std::time::Duration;

use gpumem_tests::threads::Rng;
use serde::Serialize;

use super::agents::Replace;

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub round: usize,
    pub seed: u64,
    /// The deny limit on the `deny` cgroup, in the limits file from the
    /// start (nothing held under it then) ...
    pub deny: u64,
    /// ... and raised to this through the control socket part way
    /// through, or not.
    pub deny_raised: Option<u64>,
    /// The audit limit in the limits file (SIGHUP), and its new value in
    /// the file part way through (None: taken out of the file, cleared).
    pub audit: (u64, Option<u64>),
    /// The `signal:SIGKILL` limit in the limits file on the `signal`
    /// cgroup: a process crossing it is killed.
    pub signal: u64,
    /// The container's own declared limit (`GPUMEM_LIMIT`, deny).
    pub declared: u64,
    /// When the agent is SIGSTOPped and for how long.
    pub pause: (Duration, Duration),
    /// When the agent is replaced, and how.
    pub replace: Option<(Duration, Replace)>,
    /// When the output's disk is full, and for how long.
    pub disk_full: Option<(Duration, Duration)>,
    /// When the free cgroup's last threads process is SIGKILLed.
    pub kill: Duration,
    /// The workloads' seeds and rate (calls a second each).
    pub rate: u64,
}

impl Plan {
    /// Round `round` of `rounds`, each `length` long; the agent is
    /// replaced every `replace_every` rounds, in turn each way.
    pub fn draw(seed: u64, round: usize, length: Duration, replace_every: usize) -> Self {
        let seed = seed.wrapping_add(round as u64);
        let mut rng = Rng::new(seed);
        let mut at = |from: f64, to: f64| {
            let span = ((to - from) * 1000.0) as u64;
            length.mul_f64(from) + length.mul_f64(rng.below(span.max(1)) as f64 / 1000.0)
        };
        let pause_at = at(0.1, 0.3);
        let replace_at = at(0.35, 0.5);
        let disk_at = at(0.55, 0.7);
        let kill = at(0.3, 0.9);
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut mib = |lo: u64, hi: u64| (lo + rng.below(hi - lo + 1)) * MIB;
        // Each threads process holds about 2 MiB (at most 64 allocations under
        // 64 KiB): the deny cgroup's two and the signal cgroup's one cross
        // now and then, not always.
        let (deny, audit, signal, declared) = (mib(3, 8), mib(1, 16), mib(2, 5), mib(2, 5));
        let raise = mib(1, 4);
        let audit_after = mib(1, 16);
        let (raising, clearing) = (rng.below(2) == 0, rng.below(3) == 0);
        let pause = Duration::from_millis(500 + 250 * (seed % 11));
        let replacing = (round + 1).is_multiple_of(replace_every);
        let nth = (round + 1) / replace_every;
        let how = [Replace::Takeover, Replace::Killed, Replace::Restart][nth.saturating_sub(1) % 3];
        Self {
            round,
            seed,
            deny,
            deny_raised: raising.then_some(deny + raise),
            // One round in three the rewritten file leaves it out: cleared.
            audit: (audit, (!clearing).then_some(audit_after)),
            signal,
            declared,
            pause: (pause_at, pause),
            replace: replacing.then_some((replace_at, how)),
            // Up to 1 MiB of lines is kept for a writer that fails; a longer
            // outage loses lines, which the agent counts.
            disk_full: (round % 2 == 1).then_some((disk_at, Duration::from_millis(2000 + 1000 * (seed % 5)))),
            kill,
            rate: 300,
        }
    }
}
