//! A driver call in flight while another build takes over: it entered
//! while only the old build's programs were attached and returns once the
//! new build runs (the simulated driver holds it inside the call, as a
//! real driver's allocation waits while the card makes room). From 6.13
//! the kernel runs a single-link return probe only for calls that entered
//! after it was attached, so the old build's return programs must still be
//! there at the return: the new build keeps the old one's pins until such
//! calls have returned (gpumem-user's bpf/in_flight.rs). A multi-link
//! return probe runs at every return, and its takeover waits for nothing.
use super::*;

const HELD: u64 = 3 * MIB + 4096;

/// Build B's return probes are single links (`--bpf-log`).
#[test]
fn calls_in_flight_across_a_takeover_by_single_links_are_counted_once() {
    if !privileged() {
        return;
    }
    held_across_a_takeover("held-single", &[], &["--bpf-log"]);
}

/// Build B is the default object: multi links where the kernel has them
/// (6.6+), single links elsewhere.
#[test]
fn calls_in_flight_across_a_takeover_by_multi_links_are_counted_once() {
    if !privileged() {
        return;
    }
    held_across_a_takeover("held-multi", &["--bpf-log"], &[]);
}

/// Two allocations held inside the driver while build A (`a` added to its
/// arguments) stops and build B (`b`) takes over, released once B runs:
/// one by a process under a cgroup limit (the call kept in `PENDING`: it
/// reserved bytes), one by a process under none (kept in its thread's task
/// storage). Each is counted once, and the totals are exact.
fn held_across_a_takeover(name: &str, a: &[&str], b: &[&str]) {
    let pins = PinDir::new(name);
    let cg = Cgroup::create(name);
    let limit = format!("cgroup:{}=1TiB,action=audit", cg.path);
    let card = SimCard::new(1 << 40);
    let args = [&pins.run_args()[..], &["--limit", &limit]].concat();
    let first = Agent::start_on(&card, &[&args[..], a].concat());

    let scratch = scratch();
    let held = HELD.to_string();
    let hold = |cgroup: Option<&Cgroup>, fifo: &str| {
        let at = scratch.path().join(fifo);
        nix::unistd::mkfifo(&at, nix::sys::stat::Mode::S_IRWXU).expect("making the FIFO");
        let at = at.to_str().expect("a UTF-8 path").to_string();
        let env =
            [&card.env()[..], &[("SIMCUDA_HOLD_BYTES", held.as_str()), ("SIMCUDA_HOLD_AT", &at)]].concat();
        let args = ["--scenario", "steps", "--size", &held, "--iterations", "1", "--pause"];
        let w = Workload::spawn(&args, cgroup, &env);
        let inside = std::path::PathBuf::from(format!("{at}.inside"));
        wait_until("the allocation held inside the driver", || inside.exists());
        (w, at)
    };
    let (mut limited, limited_at) = hold(Some(&cg), "limited");
    let (mut free, free_at) = hold(None, "free");
    let (status, before) = first.stop();
    assert!(status.success(), "{status:?}");

    let second = Agent::start_on(&card, &[&args[..], b].concat());
    let err = second.stderr();
    assert!(err.contains("adopted the gpumem state of build"), "{err}");
    println!("build B at its start, the calls still held inside the driver:\n{err}");
    for at in [&limited_at, &free_at] {
        // Opened for writing (once the driver's thread has it open for
        // reading) and closed: the held call reads to the end and returns.
        drop(std::fs::OpenOptions::new().write(true).open(at).expect("releasing the held call"));
    }
    let (c1, c2) = (limited.checkpoint(), free.checkpoint());
    assert_eq!((c1.held, c2.held), (HELD, HELD), "each workload's truth");
    second.wait_for_said("took over from build");
    assert_eq!(pins.builds().len(), 1, "the old build's pins are gone, the new build's stay");
    wait_across(&before, &second, &c1);
    wait_across(&before, &second, &c2);
    assert_holds(&second, &cg, &[(c1.pid, c1.held)], c1.held);
    assert_process_holds(&second.status(), c2.pid, c2.held);
    assert_every_call_whole(&second.status());

    for w in [limited, free] {
        let pid = w.pid();
        w.finish();
        second.wait_for_exit(pid);
    }
    let (status, _) = second.stop();
    assert!(status.success(), "{status:?}");
    detach_leaves_nothing(&pins, &cg);
}
