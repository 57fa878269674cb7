//! Another build taking over the pinned state: under load with every call
//! counted once, and interrupted at each step, settled by the next agent.
use gpumem::output::{Flag, Line, RecordEvent};
use gpumem_tests::harness::*;
use std::os::unix::process::ExitStatusExt;

use nix::sys::signal::Signal;

use super::{assert_holds, detach_leaves_nothing, held, wait_across};

#[test]
fn another_build_takes_over_under_load_with_every_call_counted_once() {
    if !privileged() {
        return;
    }
    // 5,000 calls a second: what the debug agent the tests run keeps up
    // with under emulation in the kernel matrix.
    let Stopped { pins, cg, limit, card, w, before } = stopped_under_load("takeover", "5000");
    let pid = w.pid();

    // Another build (the object with the programs' log compiled in)
    // attaches beside the old one, runs in its place, and removes it.
    let second = Agent::start_on(&card, &[&build_a(&pins, &limit)[..], &["--bpf-log"]].concat());
    let err = second.wait_for_said("took over from build");
    assert!(err.contains("adopted the gpumem state of build"), "{err}");
    assert_eq!(pins.builds().len(), 1, "the old build's pins are gone, the new build's stay");
    let seen = second.lines().count(pid, RecordEvent::Alloc);
    second
        .wait_for("calls counted by the new build alone", |l| l.count(pid, RecordEvent::Alloc) > seen + 1000);

    println!(
        "allocations recorded by the old build's agent: {}, by the new one's: {}",
        before.count(pid, RecordEvent::Alloc),
        second.lines().count(pid, RecordEvent::Alloc)
    );
    ends_exact(w, &before, &second, &cg, &card);
    let (status, _) = second.stop();
    assert!(status.success(), "{status:?}");
    assert_eq!(pins.builds().len(), 1);
    detach_leaves_nothing(&pins, &cg);
}

/// What [`stopped_under_load`] leaves: build A's pins, the cgroup and its
/// limit, the card, the workload running and A's records.
struct Stopped {
    pins: PinDir,
    cg: Cgroup,
    limit: String,
    card: SimCard,
    w: Workload,
    before: Vec<Line>,
}

/// Build A (the default object) running with `--persist` ([`build_a`]);
/// four threads allocating and freeing through every device family at
/// `rate` calls a second in all, from before A stops until the test lets
/// them finish (then they stop and hold what they hold); and A stopped
/// (SIGINT here; SIGTERM, what a DaemonSet's rolling update or systemd
/// sends, is handled alike), having written what it read and left its
/// pins: the kernel goes on counting until the next agent runs.
fn stopped_under_load(name: &str, rate: &str) -> Stopped {
    let pins = PinDir::new(name);
    let cg = Cgroup::create(name);
    let limit = format!("cgroup:{}=1TiB,action=audit", cg.path);
    let card = SimCard::new(1 << 40);
    let first = Agent::start_on(&card, &build_a(&pins, &limit));
    let args = ["--scenario", "threads", "--mix", "--threads", "4", "--iterations", "0", "--pause"];
    let w = Workload::spawn(&[&args[..], &["--rate", rate]].concat(), Some(&cg), &card.env());
    wait_until("the workload holding memory", || card.held(w.pid(), 0).0 > 0);
    let (status, before) = first.stop();
    assert!(status.success(), "{status:?}");
    Stopped { pins, cg, limit, card, w, before }
}

/// Build A's arguments: pinned under `pins`, with `limit`, and a ring that
/// holds every record made while no agent reads it. Build B's add
/// `--bpf-log` (another object: the programs' log compiled in).
fn build_a<'a>(pins: &'a PinDir, limit: &'a str) -> Vec<&'a str> {
    [&pins.run_args()[..], &["--limit", limit, "--ring-buffer", "64MiB"]].concat()
}

/// The threads workload `w` (paused at its end) resumed to two
/// checkpoints, at each of which `agent`'s records with those of the
/// agents `before` it hold every call once, and the process, the cgroup
/// (its limit) and the split by kind equal the workload's truth and the
/// card's count; then it exits and everything goes back to zero.
fn ends_exact(mut w: Workload, before: &[Line], agent: &Agent, cg: &Cgroup, card: &SimCard) {
    let pid = w.pid();
    for round in ["mixed", "drained"] {
        w.resume();
        let c = w.checkpoint();
        assert_eq!(c.checkpoint, round);
        let lines = wait_across(before, agent, &c);
        assert_holds(agent, cg, &[(c.pid, c.held)], c.held);
        // The card counts device memory (device, VMM), not managed memory
        // no kernel touched.
        let on_card: u64 = ["device:0", "vmm:0"].iter().filter_map(|k| c.split.get(*k)).sum();
        assert_eq!(card.held(pid, 0).0, on_card, "the card's own count");
        assert_eq!(split_of(&agent.status(), pid), c.split, "the split by kind and device");
        let frees = [before.events(pid, RecordEvent::Free), lines.events(pid, RecordEvent::Free)].concat();
        assert!(frees.iter().all(|f| !f.flags.contains(&Flag::Untracked)), "an untracked free: {frees:?}");
        assert_eq!((before.lost(), lines.lost()), (0, 0), "records lost");
        assert_every_call_whole(&agent.status());
    }
    w.finish();
    agent.wait_for_exit(pid);
    agent.wait_for_state("the cgroup and its limit to hold nothing", || held(agent, cg), |h| *h == (0, 0));
}

/// A takeover interrupted at each step (SIGTERM while the new build
/// attaches; SIGKILL with every library attached by both builds; SIGKILL
/// once the new build runs, before the old build's pins go, and once they
/// are gone) is settled by the next agent, whichever build it is, with the
/// kernel counting throughout and every call counted once. The agent
/// stops itself at each step (`GPUMEM_STOP_AT`), so each signal lands
/// exactly there.
#[test]
fn an_interrupted_takeover_is_settled_by_the_next_agent_with_every_call_counted_once() {
    if !privileged() {
        return;
    }
    // 500 calls a second: the ring holds every phase with no agent
    // reading, and the last agent reads that backlog in about a minute
    // under emulation in the kernel matrix (where each takeover detaches
    // 123 single links in about 8 s, and the debug agent reads about
    // 2,600 records a second).
    let Stopped { pins, cg, limit, card, w, mut before } = stopped_under_load("interrupted", "500");
    let a = build_a(&pins, &limit);
    let b = [&a[..], &["--bpf-log"]].concat();
    let build_a = pins.builds().pop().expect("build A's pins");
    let (term, cont) = (Signal::SIGTERM, Signal::SIGCONT);

    // SIGTERM while B attaches: B completes the takeover, then stops.
    let (status, err, lines) = Agent::start_stopped_at(&card, &b, "joining", &[term, cont]);
    assert!(status.success() && err.contains("took over from build"), "{status:?}: {err}");
    assert!(err.contains("a stop came while the agent started"), "{err}");
    let build_b = pins.builds().pop().expect("build B's pins");
    assert_eq!(pins.builds(), std::slice::from_ref(&build_b));
    before.extend(lines);

    // SIGKILL once A, taking back over, has attached everything beside B
    // (joining: B's programs run, A's stand by): both builds' pins left.
    // A again removes its own pins and takes over from B.
    killed_at(&card, &a, "attached", &pins, 2);
    let again = restarted(&card, &a, Some(("joining", &build_b, &build_a)), "took over from build");
    assert_eq!(pins.builds(), std::slice::from_ref(&build_a));
    stop_into(again, &mut before);

    // SIGKILL once B runs in A's place, before A's pins go (leaving). B
    // again removes A's pins and finishes its takeover.
    killed_at(&card, &b, "leaving", &pins, 2);
    let again =
        restarted(&card, &b, Some(("leaving", &build_b, &build_a)), "finished an interrupted takeover");
    assert_eq!(pins.builds(), std::slice::from_ref(&build_b));
    stop_into(again, &mut before);

    // SIGKILL once B's programs are gone, A's taking back over (leaving,
    // A's pins alone).
    killed_at(&card, &a, "removed", &pins, 1);
    // While it stays so, A's programs mark each thread's calls, with no
    // old program to read the marks: a thread's mark goes when it exits,
    // unless the kernel skipped that exit's run (7.x: `release_gone`'s
    // text), which the next agent settles by clearing every mark.
    let threads = ["--scenario", "threads", "--threads", "4", "--iterations", "20"];
    let skipped = pins.skipped_runs(&build_a, "process_exit");
    let brief = Workload::spawn(&threads, None, &card.env());
    let pid = brief.pid();
    let (_, status) = brief.until_exit();
    assert!(status.success(), "{status:?}");
    let (left, skipped) =
        (pins.marks_of(&build_a, pid), pins.skipped_runs(&build_a, "process_exit") - skipped);
    eprintln!(
        "marks left by the threads of {pid}: {left}, exit runs the kernel skipped meanwhile: {skipped}"
    );
    assert!(
        left as u64 <= skipped,
        "marks left by the threads of {pid}, which exited: {left}, skipped exits {skipped}"
    );
    // A again: finishes its takeover, with nothing to settle but the marks.
    let last = restarted(&card, &a, None, "finished an interrupted takeover");
    assert_eq!(pins.builds(), std::slice::from_ref(&build_a));
    assert_eq!(pins.marks_of(&build_a, pid), 0, "marks of {pid}'s threads after the next agent started");

    ends_exact(w, &before, &last, &cg, &card);
    let (status, _) = last.stop();
    assert!(status.success(), "{status:?}");
    detach_leaves_nothing(&pins, &cg);
}

/// Starts the agent with `args`, SIGKILLs it where it stopped itself at
/// `step` of its takeover, and checks that `builds` builds' pins are left.
fn killed_at(card: &SimCard, args: &[&str], step: &str, pins: &PinDir, builds: usize) {
    let kill = Signal::SIGKILL;
    let (status, err, _) = Agent::start_stopped_at(card, args, step, &[kill]);
    assert_eq!(status.signal(), Some(kill as i32), "{err}");
    assert_eq!(pins.builds().len(), builds, "{err}");
}

/// The next agent (`args`) after an interrupted takeover: it says `then`,
/// and, given `settled` (the word's phase, the build that runs, the build
/// whose pins go), that it settled those builds' pins; else that it
/// settled nothing.
fn restarted(card: &SimCard, args: &[&str], settled: Option<(&str, &str, &str)>, then: &str) -> Agent {
    let agent = Agent::start_on(card, args);
    let err = agent.wait_for_said(then);
    match settled {
        Some((phase, runs, gone)) => {
            let word = format!("({phase}: build tag {:#x} runs", tag(runs));
            let removed = format!("so build {gone}'s pins were removed");
            assert!(err.contains(&word) && err.contains(&removed), "{err}");
        }
        None => assert!(!err.contains("was left at"), "{err}"),
    }
    said(&err, "interrupted takeover");
    agent
}

/// Stops `agent` (SIGINT) and adds its records to `before`.
fn stop_into(agent: Agent, before: &mut Vec<Line>) {
    let (status, lines) = agent.stop();
    assert!(status.success(), "{status:?}");
    before.extend(lines);
}

/// The tag a build's programs know it by, from its pin directory's name.
fn tag(build: &str) -> u32 {
    gpumem::bpf::persist::tag(build)
}

/// Prints the lines of an agent's stderr that hold `what`.
fn said(err: &str, what: &str) {
    err.lines().filter(|l| l.contains(what)).for_each(|l| println!("{l}"));
}
