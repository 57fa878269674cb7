//! One round of the soak: limits set (the file and SIGHUP, the control
//! socket), processes started, the agent stopped, replaced and its disk
//! filled while they run, a process killed mid-call; then every process
//! stopped at its checkpoints and compared, run to its exit, its records
//! counted, and everything back to zero.
use std::time::{Duration, Instant};

use gpumem_tests::harness::*;
use serde::Serialize;

use super::{
    agents::Agents,
    checks::{settle, Group, Proc},
    plan::Plan,
    tally::Tally,
    watch,
    workloads::{self, Role, Running},
    world::{World, AUDIT, DENY, FREE, SIGNAL},
};

#[derive(Debug, Serialize)]
pub struct RoundReport {
    pub plan: Plan,
    pub started_s: u64,
    pub seconds: f64,
    /// What happened, in order, with the second of the round.
    pub events: Vec<String>,
    pub processes: usize,
    pub killed_by_limit: usize,
    /// Comparisons made (processes and groups at each checkpoint).
    pub compared: usize,
    /// Calls the workloads made, and how many a limit or the card refused.
    pub calls: u64,
    pub refused: u64,
    /// The highest deny usage seen against its limit, per target.
    pub deny_peak: Vec<(String, u64, u64)>,
    /// Lines the output could not take this round (a full disk), and the
    /// calls whose records were among them.
    pub unwritten: u64,
    pub calls_without_record: u64,
    pub agent: u32,
    pub agent_rss_anon_kib: u64,
    pub agent_rss_kib: u64,
    /// The agent's CPU over the round, percent of one core (None where
    /// it was replaced during the round).
    pub agent_cpu_percent: Option<f64>,
}

pub fn run(
    world: &World,
    agents: &mut Agents,
    tally: &mut Tally,
    plan: Plan,
    length: Duration,
    t0: Instant,
) -> RoundReport {
    let start = Instant::now();
    let (agent_at_start, ticks_at_start) = (agents.instance, cpu_ticks(agents.pid()));
    let mut events = Vec::new();
    let round = plan.round;
    let mut say = |what: String| {
        let e = format!("{:.1}s {what}", start.elapsed().as_secs_f64());
        println!("soak round {round}: {e}");
        events.push(e);
    };
    world.set_limits(&agents.agent, &plan, Some(plan.audit.0));
    say(format!("limits file: deny {} audit {} signal {}, SIGHUP", plan.deny, plan.audit.0, plan.signal));

    let mut procs = workloads::start(world, &plan);
    say(format!("{} processes started", procs.len()));

    let (unwritten_from, peak) = watch::during(world, agents, &mut procs, &plan, length, &mut say);

    let compared = finish(world, agents, &mut procs, &plan, &mut say);
    let killing = world.deny.contains("fallback");
    procs.iter_mut().for_each(|p| p.wait(killing));
    let killed_by_limit = procs.iter().filter(|p| p.killed_by_limit()).count();
    let unwritten = unwritten_from.map_or(0, |u| agents.agent.status().unwritten - u);
    let calls_without_record = records_counted(agents, tally, &procs, unwritten);
    zero(world, agents, &procs);
    let status = agents.agent.status();
    assert_every_call_whole(&status);
    let pid = agents.pid();
    let (rss_anon, rss) = rss_kib(pid);
    tally.empty(pid);
    tally.forget(&procs.iter().map(|p| p.host_pid).collect::<Vec<_>>());
    let total = |i: usize| procs.iter().filter_map(Running::calls).map(|c| c[i]).sum::<u64>();
    RoundReport {
        started_s: start.duration_since(t0).as_secs(),
        seconds: start.elapsed().as_secs_f64(),
        processes: procs.len(),
        killed_by_limit,
        compared,
        calls: total(0) + total(1) + total(2),
        refused: total(2),
        deny_peak: peak.into_iter().map(|(t, (u, h))| (t, u, h)).collect(),
        unwritten,
        calls_without_record,
        agent: agents.instance,
        agent_rss_anon_kib: rss_anon,
        agent_rss_kib: rss,
        // Clock ticks are hundredths of a second: ticks a second is the
        // percentage of a core.
        agent_cpu_percent: (agents.instance == agent_at_start)
            .then(|| cpu_ticks(pid).saturating_sub(ticks_at_start) as f64 / start.elapsed().as_secs_f64()),
        events,
        plan,
    }
}

/// Stops every process at its checkpoints and compares; runs each to its
/// end. How many comparisons were made.
fn finish(
    world: &World,
    agents: &Agents,
    procs: &mut [Running],
    plan: &Plan,
    say: &mut impl FnMut(String),
) -> usize {
    let mut compared = 0;
    // The threads stop together ("mixed"), free half ("drained"), exit.
    for stage in ["mixed", "drained"] {
        for p in procs.iter_mut().filter(|p| threads(p.role) && !p.gone) {
            if p.w.resume_if_alive() {
                let pid = p.host_pid;
                if let Some(c) = p.next() {
                    assert_eq!(c.checkpoint, stage, "process {pid}");
                }
            } else {
                p.gone = true;
            }
        }
        compared += compare(world, agents, procs, plan, stage);
        say(format!("{stage}: compared"));
    }
    // The others held still at their first checkpoint all along.
    loop {
        let mut moved = false;
        for p in procs.iter_mut().filter(|p| !threads(p.role) && !p.gone) {
            moved |= p.next().is_some();
        }
        if !moved {
            break;
        }
        compared += compare(world, agents, procs, plan, "families and exec");
        for p in procs.iter_mut().filter(|p| !threads(p.role) && !p.gone) {
            p.w.resume_if_alive();
        }
    }
    for p in procs.iter_mut().filter(|p| threads(p.role) && !p.gone) {
        p.w.resume_if_alive();
    }
    say("every process let go to its exit".into());
    compared
}

fn threads(role: Role) -> bool {
    matches!(role, Role::Threads(_) | Role::Victim | Role::Container)
}

/// Every process at its checkpoint against the agent, each group against
/// the sum of its processes.
fn compare(world: &World, agents: &Agents, procs: &[Running], plan: &Plan, stage: &str) -> usize {
    // The audit limit, unless the rewritten file (part way) left it out.
    let audit_ruled = plan.audit.1.is_some();
    let live: Vec<Proc> = procs
        .iter()
        .filter(|p| !p.gone)
        .filter_map(|p| {
            p.last.as_ref().map(|c| Proc { host_pid: p.host_pid, truth: c, on_card: p.on_card() })
        })
        .collect();
    let mut groups: Vec<Group> = [AUDIT, DENY, SIGNAL]
        .iter()
        .map(|&g| Group {
            target: world.target(g),
            id: Some(world.groups[g].id),
            held: procs.iter().filter(|p| p.role == Role::Threads(g)).map(Running::held).sum(),
            deny: g == DENY,
            ruled: Some(g != AUDIT || audit_ruled),
        })
        .collect();
    for p in procs.iter().filter(|p| !p.gone) {
        if let Some((_, target)) = &p.container {
            groups.push(Group {
                target: target.clone(),
                id: None,
                held: p.held(),
                deny: true,
                ruled: Some(true),
            });
        }
    }
    settle(&agents.agent, &world.card, &format!("every process and limit at {stage}"), &live, &groups)
}

/// Each process that ran to its end: its calls against the records
/// written for it, none twice. Equal, or in a round whose disk filled,
/// short by at most the lines the agent counted unwritten, once its
/// `dropped` line says the disk took that many (the lines it kept for the
/// full disk are written by then). How many calls lack a record.
fn records_counted(agents: &Agents, tally: &mut Tally, procs: &[Running], unwritten: u64) -> u64 {
    let known: Vec<(u32, [u64; 3])> = procs.iter().filter_map(|p| Some((p.host_pid, p.calls()?))).collect();
    let total = agents.agent.status().unwritten;
    let state = std::cell::RefCell::new((0, 0));
    poll(
        "every call's record written, or counted unwritten in a dropped line",
        || {
            let short = short_of(tally, &known);
            *state.borrow_mut() = (short, tally.unwritten);
            (short, tally.unwritten)
        },
        |&(short, said)| short <= unwritten && (unwritten == 0 || said == total),
        || format!("{unwritten} lines unwritten this round, {total} by agent {}", agents.instance),
    );
    state.into_inner().0
}

/// Calls of `known` (process, its calls) without their record so far;
/// panics at a call recorded twice.
fn short_of(tally: &mut Tally, known: &[(u32, [u64; 3])]) -> u64 {
    let mut short = 0;
    for &(pid, truth) in known {
        let written = tally.calls(pid);
        for i in 0..3 {
            assert!(
                written[i] <= truth[i],
                "process {pid}: {written:?} records for {truth:?} calls: counted twice"
            );
            short += truth[i] - written[i];
        }
    }
    short
}

/// Once every process has exited: nothing held by any, any cgroup or any
/// limit.
fn zero(world: &World, agents: &Agents, procs: &[Running]) {
    let gone: Vec<Proc> = Vec::new();
    let groups: Vec<Group> = [AUDIT, DENY, SIGNAL, FREE]
        .iter()
        .map(|&g| Group {
            target: world.target(g),
            id: Some(world.groups[g].id),
            held: 0,
            deny: false,
            ruled: None,
        })
        .collect();
    settle(&agents.agent, &world.card, "every cgroup and limit back to zero", &gone, &groups);
    let pids: Vec<u32> = procs.iter().map(|p| p.host_pid).collect();
    agents.agent.wait_for_state(
        "every process of the round gone from the ledger",
        || {
            agents
                .agent
                .status()
                .processes
                .iter()
                .filter(|e| e.pid.is_some_and(|p| pids.contains(&p)))
                .map(|e| (e.pid, e.bytes, e.kernel_bytes))
                .filter(|e| e.1 + e.2 > 0)
                .collect::<Vec<_>>()
        },
        Vec::is_empty,
    );
}
