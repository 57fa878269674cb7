//! The soak: rounds of random workloads under changing limits while the
//! agent is stopped, restarted, killed, replaced by another build and its
//! disk filled, every byte compared at every checkpoint. `cargo xtask
//! test` runs it for `GPUMEM_SOAK_SECONDS` (150 by default); `cargo xtask
//! soak --minutes N` runs it alone for longer. Each round (`round.rs`)
//! draws what it does from the seed (`plan.rs`); the report (JSON, every
//! round) goes to `GPUMEM_SOAK_REPORT` (default `target/soak/report.json`).
mod agents;
mod checks;
mod plan;
mod report;
mod round;
mod tally;
mod watch;
mod workloads;

use std::{path::PathBuf, time::Duration};

use gpumem_tests::harness::*;

use self::{agents::Agents, plan::Plan, report::Report, tally::Tally};

/// The soak's cgroups, by index.
pub const AUDIT: usize = 0;
pub const DENY: usize = 1;
pub const SIGNAL: usize = 2;
pub const FREE: usize = 3;

const MIB: u64 = 1 << 20;

/// What stays for the whole soak: the card, the pins, the output's disk,
/// the limits file, the cgroups, podman.
pub struct World {
    pub card: SimCard,
    pub pins: PinDir,
    pub disk: Tmpfs,
    pub config: PathBuf,
    pub groups: Vec<Cgroup>,
    pub podman: Option<(Podman, PathBuf)>,
    /// The deny action as this kernel takes it: `deny`, or where uprobe
    /// programs cannot write registers, deny with SIGKILL as its fallback
    /// (the process crossing is killed, never let past).
    pub deny: String,
    _scratch: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        let scratch = scratch();
        let config = scratch.path().join("gpumem.toml");
        std::fs::write(&config, "").unwrap();
        // No SKIPPED line without podman: the soak runs, without its
        // container, and says so in its report.
        let podman = std::env::var_os("GPUMEM_PODMAN").and_then(|_| Podman::available()).map(|p| {
            let rootfs = p.rootfs("soak", false);
            (p, rootfs)
        });
        Self {
            card: SimCard::new(1 << 40),
            pins: PinDir::new("soak"),
            disk: Tmpfs::mount(256 * MIB),
            config,
            groups: ["soak-audit", "soak-deny", "soak-signal", "soak-free"].map(Cgroup::create).into(),
            podman,
            deny: match register_write_refusal() {
                None => "action=deny".into(),
                Some(why) => {
                    println!("soak: deny falls back to SIGKILL on this kernel: {why}");
                    "action=deny,fallback=signal:SIGKILL".into()
                }
            },
            _scratch: scratch,
        }
    }

    /// The limit target of cgroup `g`.
    pub fn target(&self, g: usize) -> String {
        format!("cgroup:{}", self.groups[g].path)
    }

    /// The limits file: `audit` on the audit cgroup (None: none, so a
    /// reload clears it), the plan's
    /// `signal:SIGKILL` limit on the signal cgroup and its deny limit on
    /// the deny cgroup; SIGHUP; waited for. (The file is the policy: a
    /// reload, and a start with `--config`, clear rules it does not hold,
    /// those set through the control socket included.)
    pub fn set_limits(&self, agent: &Agent, plan: &Plan, audit: Option<u64>) {
        let entry = |g: usize, hard: u64, action: &str| {
            let path = &self.groups[g].path;
            format!("[[limit]]\ncgroup = \"{path}\"\nhard = \"{}MiB\"\n{action}\n", hard / MIB)
        };
        let deny = match self.deny.split_once(",fallback=") {
            Some((_, fallback)) => format!("action = \"deny\"\nfallback = \"{fallback}\""),
            None => "action = \"deny\"".into(),
        };
        let audit_rule = audit.map_or(String::new(), |a| entry(AUDIT, a, "action = \"audit\""));
        let text = audit_rule
            + &entry(SIGNAL, plan.signal, "action = \"signal:SIGKILL\"")
            + &entry(DENY, plan.deny, &deny);
        std::fs::write(&self.config, text).unwrap();
        // The agent says what each reload did, a line per rule: one more
        // line than before is this reload's (equal rules read back say
        // nothing of it).
        let reloads = || agent.stderr().lines().filter(|l| l.contains("SIGHUP: ")).count();
        let before = reloads();
        agent.signal(nix::sys::signal::Signal::SIGHUP);
        let (a, s, d) = (self.target(AUDIT), self.target(SIGNAL), self.target(DENY));
        agent.wait_for_state(
            "the limits file reread",
            || (reloads(), agent.limits()),
            |(n, l)| {
                *n > before
                    && audit.map_or(rule(l, &a).is_none(), |h| rule_is(l, &a, h))
                    && rule_is(l, &s, plan.signal)
                    && rule_is(l, &d, plan.deny)
            },
        );
    }

    /// The deny limit raised through the control socket; waited for.
    pub fn raise_deny(&self, agent: &Agent, hard: u64) {
        let target = self.target(DENY);
        let (ok, _, err) = agent.limit(&["set", &format!("{target}={}MiB,{}", hard / MIB, self.deny)]);
        assert!(ok, "gpumem limit set: {err}");
        agent.wait_for_state("the deny limit raised", || agent.limits(), |l| rule_is(l, &target, hard));
    }
}

fn rule_is(limits: &[gpumem::output::LimitStatus], target: &str, hard: u64) -> bool {
    rule(limits, target).is_some_and(|r| r.hard == hard)
}

/// The soak's settings, from the environment.
struct Config {
    seconds: u64,
    round: Duration,
    seed: u64,
    report: PathBuf,
}

impl Config {
    fn from_env() -> Self {
        let num = |var: &str| {
            std::env::var(var).ok().map(|v| v.parse::<u64>().unwrap_or_else(|e| panic!("{var}={v}: {e}")))
        };
        let seed = num("GPUMEM_SOAK_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
        });
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| paths().root.join("target"));
        Self {
            seconds: num("GPUMEM_SOAK_SECONDS").unwrap_or(150),
            round: Duration::from_secs(round_seconds(num("GPUMEM_SOAK_ROUND_SECONDS").unwrap_or(25))),
            seed,
            report: std::env::var_os("GPUMEM_SOAK_REPORT")
                .map_or_else(|| target.join("soak/report.json"), PathBuf::from),
        }
    }
}

/// A round's length, 15 to 60 s: long enough for its outages, short
/// enough that its records fit the output's disk (emptied at each end).
fn round_seconds(s: u64) -> u64 {
    assert!((15..=60).contains(&s), "GPUMEM_SOAK_ROUND_SECONDS={s}: a round lasts 15 to 60 s");
    s
}

#[test]
fn a_soak_of_random_workloads_restarts_takeovers_and_limit_changes_stays_exact() {
    if !privileged() {
        return;
    }
    let cfg = Config::from_env();
    let rounds = (cfg.seconds / cfg.round.as_secs().max(1)).max(1) as usize;
    let replace_every = (rounds / 12).max(1);
    println!(
        "soak: {rounds} rounds of {:?}, seed {} (GPUMEM_SOAK_SEED), agent replaced every {replace_every} round(s); report {}",
        cfg.round,
        cfg.seed,
        cfg.report.display()
    );
    let world = World::new();
    let output = world.disk.path().join("events.jsonl");
    let mut agents = Agents::start(&world.pins, &world.config, output.clone(), &world.card);
    let mut tally = Tally::new(output);
    let mut report = Report::new(cfg.seed, cfg.seconds, cfg.round, world.podman.is_some());
    let t0 = std::time::Instant::now();
    for round in 0..rounds {
        let plan = Plan::draw(cfg.seed, round, cfg.round, replace_every);
        let r = round::run(&world, &mut agents, &mut tally, plan, cfg.round, t0);
        println!("{}", report::line(&r));
        report.rounds.push(r);
        report.write(&cfg.report);
    }
    report.finish(agents.health(), tally.lines, t0.elapsed());
    report.write(&cfg.report);
    println!("{}", report.summary());
    let status = agents.agent.end(nix::sys::signal::Signal::SIGINT);
    assert!(status.success(), "the last agent stopped with {status:?}");
    let out = world.pins.detach();
    assert!(out.status.success(), "gpumem detach: {}", String::from_utf8_lossy(&out.stderr));
    report.assert_bounds();
}
