//! What happens to the agent and the limits while a round's processes
//! run: the agent SIGSTOPped, replaced (restart, SIGKILL, takeover), its
//! output's disk filled and emptied; the limits file rewritten (SIGHUP), the
//! deny limit raised through the control socket; a process SIGKILLed. Every
//! 200 ms each deny limit's usage is read: never over it.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use super::{
    agents::Agents,
    checks,
    plan::Plan,
    workloads::{Role, Running},
    world::{World, DENY},
};

/// Runs the round's `length` with its outages; returns the agent's count
/// of unwritten lines before the disk filled (if it did) and the highest
/// usage seen under each deny limit, with the limit.
pub fn during(
    world: &World,
    agents: &mut Agents,
    procs: &mut [Running],
    plan: &Plan,
    length: Duration,
    say: &mut impl FnMut(String),
) -> (Option<u64>, BTreeMap<String, (u64, u64)>) {
    let start = Instant::now();
    let mut deny_targets = vec![world.target(DENY)];
    deny_targets.extend(procs.iter().filter_map(|p| p.container.as_ref().map(|c| c.1.clone())));
    let mut peak = BTreeMap::<String, (u64, u64)>::new();
    let (mut paused, mut replaced, mut filled, mut raised, mut reloaded, mut killed) =
        (false, false, false, false, false, false);
    let mut unwritten_from = None;
    // A round whose outages ran long goes on until each has happened.
    let all_done = |d: [bool; 6]| {
        let [paused, replaced, filled, raised, reloaded, killed] = d;
        paused
            && (replaced || plan.replace.is_none())
            && (filled || plan.disk_full.is_none())
            && (raised || plan.deny_raised.is_none())
            && reloaded
            && killed
    };
    while start.elapsed() < length || !all_done([paused, replaced, filled, raised, reloaded, killed]) {
        let now = start.elapsed();
        if !paused && now >= plan.pause.0 {
            paused = true;
            agents.pause(plan.pause.1);
            say(format!("agent SIGSTOPped for {:?}", plan.pause.1));
        }
        if let Some((_, how)) = plan.replace.filter(|r| !replaced && now >= r.0) {
            replaced = true;
            let said = agents.replace(how);
            say(format!("agent replaced ({how:?}), agent {}: {said}", agents.instance));
        }
        // The disk fills after any replacement: one agent counts what it
        // could not write.
        if let Some((at, len)) = plan.disk_full.filter(|_| !filled && replaced == plan.replace.is_some()) {
            if now >= at {
                filled = true;
                unwritten_from = Some(fill(world, agents, len, say));
            }
        }
        if !reloaded && now >= length.mul_f64(0.6) {
            reloaded = true;
            world.set_limits(&agents.agent, plan, plan.audit.1);
            let audit = plan.audit.1.map_or("cleared".to_string(), |a| a.to_string());
            say(format!("limits file rewritten (audit {audit}), SIGHUP"));
        }
        if let Some(to) = plan.deny_raised.filter(|_| !raised && now >= length.mul_f64(0.75)) {
            raised = true;
            world.raise_deny(&agents.agent, to);
            say(format!("deny limit raised to {to}"));
        }
        if !killed && now >= plan.kill {
            killed = true;
            procs.iter_mut().filter(|p| p.role == Role::Victim).for_each(|p| p.w.kill());
            say("victim SIGKILLed".into());
        }
        for (t, v) in checks::within_deny(&agents.agent.limits(), &deny_targets) {
            peak.entry(t).and_modify(|e| *e = (*e).max(v)).or_insert(v);
        }
        std::thread::sleep(Duration::from_millis(200)); // the pace of the watch
    }

    (unwritten_from, peak)
}

/// Fills the output's disk for `len`, then empties it; the agent's count
/// of unwritten lines before.
fn fill(world: &World, agents: &Agents, len: Duration, say: &mut impl FnMut(String)) -> u64 {
    let before = agents.agent.status().unwritten;
    let filler = world.disk.fill();
    say("output disk full".into());
    std::thread::sleep(len); // the outage's length is the point
    std::fs::remove_file(&filler).expect("emptying the disk");
    say("output disk emptied".into());
    before
}
