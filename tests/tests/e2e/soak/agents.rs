//! The soak's agent, one after another: started with `--persist` and the
//! limits file, stopped and started again (SIGINT, or SIGKILL), replaced
//! by another build (the object with the programs' log compiled in, as
//! the takeover test does), SIGSTOPped. What each agent counted of its
//! own health is kept when it goes.
use std::{path::PathBuf, process::ExitStatus, time::Instant};

use gpumem::output::StatusReport;
use gpumem_tests::harness::*;
use nix::sys::signal::Signal;
use serde::Serialize;

/// How an agent is replaced.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Replace {
    /// SIGINT, then the same build: it adopts the pinned state.
    Restart,
    /// SIGKILL (nothing runs after it), then the same build.
    Killed,
    /// SIGINT, then the other build: it takes over.
    Takeover,
}

/// What the agents that ran counted of their own health, summed.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Health {
    pub agents: u32,
    pub records: u64,
    pub dropped: u64,
    pub unmatched_returns: u64,
    pub late_records: u64,
    pub skipped_runs: u64,
    pub unwritten: u64,
}

impl Health {
    fn add(&mut self, s: &StatusReport) {
        self.agents += 1;
        self.records += s.records;
        self.dropped += s.dropped;
        self.unmatched_returns += s.unmatched_returns;
        self.late_records += s.late_records;
        self.skipped_runs += s.skipped_runs;
        self.unwritten += s.unwritten;
    }
}

pub struct Agents {
    pub agent: Agent,
    output: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Whether the running agent is the other build (`--bpf-log`).
    pub other_build: bool,
    /// Which agent this is (0: the first).
    pub instance: u32,
    /// The agents that ended.
    pub ended: Health,
    pub started: Instant,
}

impl Agents {
    /// The first agent: pinned under `pins`, its limits file `config`,
    /// writing to `output`, on `card`.
    pub fn start(pins: &PinDir, config: &std::path::Path, output: PathBuf, card: &SimCard) -> Self {
        let mut args: Vec<String> = pins.run_args().iter().map(|s| s.to_string()).collect();
        // A ring that holds what is made while no agent reads (a restart,
        // a SIGSTOP) at the soak's rate.
        args.extend(["--ring-buffer", "64MiB", "--config"].map(String::from));
        args.push(config.to_str().unwrap().to_string());
        let env: Vec<(String, String)> =
            card.env().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut a = Self {
            agent: launch(&output, &args, &env, false),
            output,
            args,
            env,
            other_build: false,
            instance: 0,
            ended: Health::default(),
            started: Instant::now(),
        };
        a.started = Instant::now();
        a
    }

    pub fn pid(&self) -> u32 {
        self.agent.pid()
    }

    /// Replaces the agent `how`; what the new one said of the state it
    /// found (its stderr's line on adoption or takeover).
    pub fn replace(&mut self, how: Replace) -> String {
        let before = self.agent.status();
        assert_every_call_whole(&before);
        let signal = if how == Replace::Killed { Signal::SIGKILL } else { Signal::SIGINT };
        let status: ExitStatus = self.agent.end(signal);
        if signal == Signal::SIGINT {
            assert!(
                status.success(),
                "the agent stopped with {status:?}; its stderr:\n{}",
                self.agent.stderr()
            );
        }
        self.ended.add(&before);
        if how == Replace::Takeover {
            self.other_build = !self.other_build;
        }
        self.agent = launch(&self.output, &self.args, &self.env, self.other_build);
        self.instance += 1;
        self.started = Instant::now();
        let said = match how {
            Replace::Takeover => "took over from build",
            _ => "adopted the gpumem state",
        };
        let err = self.agent.wait_for_said(said);
        let line = err.lines().find(|l| l.contains(said));
        line.unwrap_or_else(|| panic!("after a {how:?} the agent did not say `{said}`; its stderr:\n{err}"))
            .to_string()
    }

    /// SIGSTOP for `pause`, then SIGCONT: the kernel goes on counting and
    /// enforcing, records wait in the ring.
    pub fn pause(&self, pause: std::time::Duration) {
        // The length of the outage is the point.
        stopped_while(self.pid(), || std::thread::sleep(pause));
    }

    /// The agents' health so far, the running one's included.
    pub fn health(&self) -> Health {
        let mut h = self.ended.clone();
        h.add(&self.agent.status());
        h
    }
}

fn launch(output: &std::path::Path, args: &[String], env: &[(String, String)], other: bool) -> Agent {
    let mut extra: Vec<&str> = args.iter().map(String::as_str).collect();
    if other {
        extra.push("--bpf-log");
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Agent::start_with(Some(output.to_path_buf()), &env, &extra)
}
