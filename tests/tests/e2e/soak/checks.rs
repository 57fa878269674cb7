//! What the soak compares at a checkpoint, while every workload holds
//! still: each process's bytes (the agent's ledger and the kernel's count)
//! and split by kind and device equal its own truth, and the simulated
//! card's count; each cgroup's bytes and its limit's usage equal what its
//! processes hold; a deny limit's usage is within it. Waited for until it
//! holds (the agent may still be reading), failing with every difference.
use std::collections::BTreeMap;

use gpumem::output::{LimitStatus, StatusReport};
use gpumem_tests::{harness::*, truth::Checkpoint};

/// One process as its checkpoint says.
pub struct Proc<'a> {
    pub host_pid: u32,
    pub truth: &'a Checkpoint,
    /// Compare with the simulated card's count (device 0's device and VMM
    /// memory): processes on the soak's own card.
    pub on_card: bool,
}

/// One cgroup (or a container's declared limit) and what it must hold.
pub struct Group {
    /// `cgroup:/path`: the limit's target.
    pub target: String,
    /// The cgroup's id, where the status has it (not for a container:
    /// its processes are compared one by one).
    pub id: Option<u64>,
    pub held: u64,
    /// Whether its limit denies: usage at most its hard bytes.
    pub deny: bool,
    /// Whether a limit must be in force on it (Some(false): none may be;
    /// None: either).
    pub ruled: Option<bool>,
}

/// Waits until every process and group holds what it must; panics with
/// the differences left at the deadline.
pub fn settle(agent: &Agent, card: &SimCard, what: &str, procs: &[Proc], groups: &[Group]) -> usize {
    let read = || {
        let t = std::time::Instant::now();
        let d = differences(&agent.status(), &agent.limits(), card, procs, groups);
        assert!(t.elapsed().as_secs() < 20, "reading the agent and the card took {:?}", t.elapsed());
        d
    };
    let left = poll(what, read, |d| d.is_empty(), || format!("agent stderr tail:\n{}", tail(agent)));
    assert!(left.is_empty());
    procs.len() + groups.len()
}

fn differences(
    s: &StatusReport,
    limits: &[LimitStatus],
    card: &SimCard,
    procs: &[Proc],
    groups: &[Group],
) -> Vec<String> {
    let mut d = Vec::new();
    for p in procs {
        let (pid, c) = (p.host_pid, p.truth);
        let (bytes, kernel) = proc_entry(s, pid).map_or((0, 0), |e| (e.bytes, e.kernel_bytes));
        if (bytes, kernel) != (c.held, c.held) {
            d.push(format!(
                "process {pid} at {}: (ledger, kernel) {:?}, truth {}",
                c.checkpoint,
                (bytes, kernel),
                c.held
            ));
        }
        if !c.split.is_empty() && split_of(s, pid) != c.split {
            d.push(format!(
                "process {pid} at {}: split {:?}, truth {:?}",
                c.checkpoint,
                split_of(s, pid),
                c.split
            ));
        }
        if p.on_card {
            let on_card: u64 = ["device:0", "vmm:0"].iter().filter_map(|k| c.split.get(*k)).sum();
            let counted = card.held(pid, 0).0;
            if counted != on_card {
                d.push(format!("process {pid}: the card counts {counted}, the truth {on_card}"));
            }
        }
    }
    for g in groups {
        if let Some(id) = g.id {
            let (bytes, kernel) = cgroup_entry(s, id).map_or((0, 0), |e| (e.bytes, e.kernel_bytes));
            if (bytes, kernel) != (g.held, g.held) {
                d.push(format!("{}: (ledger, kernel) {:?}, truth {}", g.target, (bytes, kernel), g.held));
            }
        }
        match (rule(limits, &g.target), g.ruled) {
            (Some(_), Some(false)) => d.push(format!("{}: a limit in force after it was cleared", g.target)),
            (None, Some(true)) => d.push(format!("{}: no limit in force (holding {})", g.target, g.held)),
            (Some(r), _) if r.usage != g.held => {
                d.push(format!("{}: limit usage {}, truth {}", g.target, r.usage, g.held))
            }
            (Some(r), _) if g.deny && g.held > r.hard => {
                panic!(
                    "{} holds {} under its deny limit of {}: a hard limit passed",
                    g.target, g.held, r.hard
                )
            }
            _ => {}
        }
    }
    d
}

/// Panics if a deny limit's usage is over its hard bytes; the largest
/// usage/hard seen, for the report.
pub fn within_deny(limits: &[LimitStatus], targets: &[String]) -> BTreeMap<String, (u64, u64)> {
    let mut seen = BTreeMap::new();
    for t in targets {
        if let Some(r) = rule(limits, t) {
            assert!(
                r.usage <= r.hard,
                "{t}: usage {} over its deny limit {}: a hard limit passed",
                r.usage,
                r.hard
            );
            seen.insert(t.clone(), (r.usage, r.hard));
        }
    }
    seen
}

/// The agent's last stderr lines.
pub fn tail(agent: &Agent) -> String {
    let err = agent.stderr();
    let lines: Vec<&str> = err.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
