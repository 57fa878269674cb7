//! `gpumem run --persist`: the agent killed with a limit in force, the
//! kernel enforcing and counting with no agent, a restarted agent adopting
//! the pinned state with totals exact; another build refused; `gpumem
//! detach` leaving nothing attached.
use gpumem::output::{Flag, Line, RecordEvent};
use gpumem_tests::{harness::*, truth::Checkpoint};
use std::os::unix::process::ExitStatusExt;

use nix::sys::signal::Signal;

mod families;
mod in_flight;
mod takeover;

const MIB: u64 = 1 << 20;

fn steps(cg: &Cgroup, size: u64, n: u32, pause: bool) -> Workload {
    let (size, n) = (size.to_string(), n.to_string());
    let mut args = vec!["--scenario", "steps", "--size", &size, "--iterations", &n];
    if pause {
        args.push("--pause");
    }
    Workload::spawn(&args, Some(cg), &[])
}

/// Process, cgroup and limit all hold `held`, in the ledger and the kernel.
pub(super) fn assert_holds(agent: &Agent, cg: &Cgroup, procs: &[(u32, u64)], held: u64) {
    let s = agent.status();
    for &(pid, bytes) in procs {
        assert_process_holds(&s, pid, bytes);
    }
    assert_cgroup_holds(&s, cg, held);
    let limits = agent.limits();
    let rule = rule(&limits, &format!("cgroup:{}", cg.path)).expect("the limit is in force");
    assert_eq!(rule.usage, held, "{limits:?}");
}

#[test]
fn a_killed_agent_leaves_the_limit_enforced_and_its_successor_adopts_the_exact_totals() {
    if !privileged() {
        return;
    }
    let pins = PinDir::new("restart");
    let cg = Cgroup::create("persist");
    let limit = format!("cgroup:{}=16MiB", cg.path);
    let args = [&pins.run_args()[..], &["--limit", &limit]].concat();

    let first = Agent::start(&args);
    let mut basic = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let b1 = basic.checkpoint();
    let mut grower = steps(&cg, 4 * MIB, 3, true);
    let g1 = grower.checkpoint();
    first.wait_for_checkpoint(&b1);
    first.wait_for_checkpoint(&g1);
    let before = first.kill();

    // No agent runs: the kernel counts the next step and stops a process
    // that would cross the limit (4.07 + 8 MiB held, + 8 MiB > 16 MiB).
    grower.resume();
    let g2 = grower.checkpoint();
    let (seen, status) = steps(&cg, 8 * MIB, 2, false).until_exit();
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status:?}");

    let second = Agent::start(&args);
    assert!(second.stderr().contains("adopted the gpumem state pinned at"), "{}", second.stderr());
    assert!(second.stderr().contains("adopted the pinned"), "{}", second.stderr());
    assert_holds(&second, &cg, &[(b1.pid, b1.held), (g2.pid, g2.held)], b1.held + g2.held);

    // Frees of allocations made before the restart are matched, not
    // `untracked`; a new step is charged on top.
    basic.resume();
    let b2 = basic.checkpoint();
    grower.resume();
    let g3 = grower.checkpoint();
    wait_across(&before, &second, &b2);
    let lines = wait_across(&before, &second, &g3);
    let frees = lines.events(b2.pid, RecordEvent::Free);
    assert_eq!(frees.len(), 2, "{frees:?}");
    assert!(frees.iter().all(|f| !f.flags.contains(&Flag::Untracked)), "{frees:?}");
    assert_holds(&second, &cg, &[(b2.pid, b2.held), (g3.pid, g3.held)], b2.held + g3.held);

    basic.run_to_end();
    grower.run_to_end();
    second.wait_for_exit(b2.pid);
    second.wait_for_exit(g3.pid);
    second.wait_for_state(
        "the cgroup and its limit to hold nothing",
        || held(&second, &cg),
        |h| *h == (0, 0),
    );
    let (status, _) = second.stop();
    assert!(status.success(), "{status:?}");
    assert!(pins.dir.is_dir(), "a --persist agent that stops leaves its pins");
    detach_leaves_nothing(&pins, &cg);
}

/// A limit set at run time on a cgroup already holding memory carries that
/// memory in its base; the base survives a restart knowing what it
/// carries: memory freed while no agent ran leaves it at the next start,
/// and the rest as it is freed.
#[test]
fn a_limits_carried_memory_is_known_again_after_a_restart() {
    if !privileged() {
        return;
    }
    let pins = PinDir::new("carried");
    let cg = Cgroup::create("persist-carried");
    let target = format!("cgroup:{}", cg.path);
    let usage = |agent: &Agent| rule(&agent.limits(), &target).expect("the limit is in force").usage;
    let first = Agent::start(&pins.run_args());
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let allocated = w.checkpoint();
    first.wait_for_checkpoint(&allocated);
    let (ok, _, err) = first.limit(&["set", &format!("{target}=1GiB,action=audit")]);
    assert!(ok, "{err}");
    assert_eq!(usage(&first), allocated.held, "what the cgroup held, carried");
    first.kill();

    // Freed while no agent runs: the kernel counted nothing of it under
    // the limit, so only the next agent can take it out of the base.
    w.resume();
    let freed = w.checkpoint();
    assert!(freed.held < allocated.held);
    let second = Agent::start(&pins.run_args());
    assert!(second.stderr().contains("were freed while no agent ran"), "{}", second.stderr());
    assert_eq!(usage(&second), freed.held);
    w.run_to_end();
    second.wait_for_state("the rest to leave the limit at exit", || usage(&second), |u| *u == 0);
    drop(second);
    assert!(pins.detach().status.success());
}

/// An agent killed after it read records from the ring and before it
/// wrote them (it stops itself there: `GPUMEM_STOP_AT=read`) had given
/// none of them back to the kernel: its successor reads them from the
/// pinned ring and writes them, and the records of both agents hold every
/// call once.
#[test]
fn records_a_killed_agent_read_and_never_wrote_are_written_by_its_successor() {
    if !privileged() {
        return;
    }
    let pins = PinDir::new("unwritten");
    let cg = Cgroup::create("persist-unwritten");
    let first = Agent::start_with_env(&[("GPUMEM_STOP_AT", "read")], &pins.run_args());
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let c = w.checkpoint();
    let pid = first.pid();
    // Its line is written before it stops, and read from the pipe by the
    // harness's thread, which may not have read it yet when it stops.
    let line = "GPUMEM_STOP_AT: stopping at read: ";
    wait_until("the agent to stop with records read and not yet written, and say so", || {
        stopped(pid) && first.stderr().contains(line)
    });
    let said = first.stderr();
    let before = first.kill();
    let read: u64 = said
        .split_once(line)
        .and_then(|(_, rest)| rest.split_once(" record(s) read"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("the agent did not say what it read: {said}"));
    assert!(read >= 1, "{said}");
    let written = [Rec::Alloc, Rec::Free].iter().map(|&e| before.count(c.pid, e)).sum::<usize>();
    assert_eq!(written, 0, "the first agent wrote none of the workload's records");

    let second = Agent::start(&pins.run_args());
    wait_across(&before, &second, &c);
    w.run_to_end();
    second.wait_for_exit(c.pid);
    drop(second);
    assert!(pins.detach().status.success());
}

/// Waits until the records of both agents together hold checkpoint `c`'s
/// calls, each once: what the first wrote before it was killed, and what
/// the second read, the calls made while no agent ran among them (they
/// waited in the pinned ring buffer). The wait goes on while the count
/// rises: under emulation the debug agent reads about 2,600 records a
/// second, and a backlog of every phase with no agent reading takes it
/// longer than one deadline.
pub(super) fn wait_across(before: &[Line], agent: &Agent, c: &Checkpoint) -> Vec<Line> {
    let calls = [Rec::Alloc, Rec::Free, Rec::AllocFailed];
    let want = (vec![c.allocs, c.frees, c.failed], 0);
    let earlier: Vec<usize> = calls.iter().map(|&e| before.count(c.pid, e)).collect();
    let lost_before = before.lost();
    // Every 5 s what had been read and the agent's CPU time: on a timeout,
    // whether the agent was slow (busy, counts rising) or stuck.
    let progress = std::cell::RefCell::new(Progress::default());
    let seen = || {
        let now = agent.with_lines(|lines| {
            let counts = calls
                .iter()
                .zip(&earlier)
                .map(|(&e, n)| (n + lines.count(c.pid, e)) as u64)
                .collect::<Vec<u64>>();
            (counts, lost_before + lines.lost())
        });
        progress.borrow_mut().sample(agent.pid(), &now.0);
        now
    };
    let what = format!("the records of checkpoint {c:?} across both agents (allocs, frees, failed; lost)");
    let context = || {
        format!(
            "wanted {want:?}; {}\n{}\nstderr:\n{}",
            progress.borrow().samples.join("; "),
            unseen(before, agent, c),
            agent.stderr()
        )
    };
    poll_moving(&what, seen, |s| *s == want, context);
    agent.lines()
}

/// Where a call [`wait_across`] waits for was lost, if the agents know:
/// whether the kernel counted what the process holds (a record lost on
/// the way, or a call the kernel never saw), and what each agent's
/// counters and last `dropped` line say of calls not seen whole.
fn unseen(before: &[Line], agent: &Agent, c: &Checkpoint) -> String {
    let s = agent.status();
    let held = proc_entry(&s, c.pid).map(|e| (e.bytes, e.kernel_bytes));
    let last = |lines: &[Line]| lines.dropped().last().map(|d| format!("{d:?}"));
    format!(
        "process {}: (ledger, kernel) bytes {held:?}, the workload's truth {}; the agent's returns \
         without their entry {}, records lost {}, late {}, runs skipped {}; the ring's bytes past \
         what it read {}; the last dropped line of the agents before: {:?}, of this one: {:?}",
        c.pid,
        c.held,
        s.unmatched_returns,
        s.dropped,
        s.late_records,
        s.skipped_runs,
        s.ring_unread_bytes,
        last(before),
        agent.with_lines(last)
    )
}

/// What [`wait_across`] saw every 5 s.
#[derive(Default)]
struct Progress {
    started: Option<std::time::Instant>,
    samples: Vec<String>,
}

impl Progress {
    fn sample(&mut self, agent: u32, counts: &[u64]) {
        let started = *self.started.get_or_insert_with(std::time::Instant::now);
        let at = started.elapsed().as_secs();
        if at >= 5 * self.samples.len() as u64 {
            let cpu = cpu_ticks(agent);
            self.samples.push(format!("at {at} s: {counts:?} read, the agent's CPU {cpu} ticks"));
        }
    }
}

/// What the cgroup holds in the kernel and under its limit.
pub(super) fn held(agent: &Agent, cg: &Cgroup) -> (u64, u64) {
    let kernel = cgroup_entry(&agent.status(), cg.id).map_or(0, |e| e.kernel_bytes);
    let limits = agent.limits();
    (kernel, rule(&limits, &format!("cgroup:{}", cg.path)).map_or(0, |r| r.usage))
}

/// `gpumem detach` removes every pin, and with them the probes: a process
/// crossing the limit the pins enforced runs to its end.
pub(super) fn detach_leaves_nothing(pins: &PinDir, cg: &Cgroup) {
    let out = pins.detach();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("detached") && said.contains("probe link(s)"), "{said}");
    assert!(!pins.dir.exists(), "{} left behind", pins.dir.display());
    steps(cg, 8 * MIB, 3, false).finish();
    let out = pins.detach();
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing of gpumem is pinned"));
}

#[test]
fn another_build_is_refused_and_a_plain_agent_will_not_start_beside_pins() {
    if !privileged() {
        return;
    }
    let pins = PinDir::new("refusals");
    let agent = Agent::start(&pins.run_args());
    // One agent at a time on the pins (another control socket here), and
    // no detach under it.
    let (status, err) = Agent::start_failing(&pins.run_args());
    let using = format!("pid {} (gpumem) is using the gpumem pins", agent.pid());
    assert!(!status.success() && err.contains(&using), "{err}");
    let out = pins.detach();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&using));
    let (status, _) = agent.stop();
    assert!(status.success());
    assert!(pins.dir.is_dir());

    // Another ring size is another build's layout: refused, saying what to do.
    let other = [&pins.run_args()[..], &["--ring-buffer", "8MiB"]].concat();
    let (status, err) = Agent::start_failing(&other);
    assert!(!status.success(), "{err}");
    assert!(err.contains("another build") && err.contains("gpumem detach"), "{err}");

    let (status, err) = Agent::start_failing(&["--pin-dir", pins.arg()]);
    assert!(!status.success(), "{err}");
    assert!(err.contains("start with --persist to adopt it"), "{err}");

    // Both refusals left the pins as they were: the same build adopts them.
    let again = Agent::start(&pins.run_args());
    assert!(again.stderr().contains("adopted the gpumem state"), "{}", again.stderr());
    // Adopting with no rules given keeps the agent's default action.
    let (ok, _, err) = again.limit(&["set", "comm:persist-none=1GiB"]);
    assert!(ok, "{err}");
    assert_eq!(
        rule(&again.limits(), "comm:persist-none").map(|r| r.action.clone()).as_deref(),
        Some("signal:9")
    );
    drop(again);
    assert!(pins.detach().status.success());
    assert!(!pins.dir.exists());
}
