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
mod world;

use std::{path::PathBuf, time::Duration};

use gpumem_tests::harness::*;

use self::{agents::Agents, plan::Plan, report::Report, tally::Tally, world::World};

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
