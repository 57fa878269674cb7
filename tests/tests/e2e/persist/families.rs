//! Every allocation family held across a restart, across a takeover by
//! another build, and across a takeover from a build of the layout before
//! (its live table's slots placed by the whole address), then freed: the
//! successor's ledger matches each free to the allocation its predecessor
//! saw, by kind and device, to the byte.
use gpumem_tests::{harness::*, truth::Checkpoint};

#[test]
fn every_family_held_across_a_restart_or_a_takeover_is_freed_exactly_after_it() {
    if !privileged() {
        return;
    }
    // The layout before: this build making its state as a build of layout
    // 3 did (`GPUMEM_LAYOUT_FOR_A_TEST`), taken over by another build,
    // which must look for each allocation where that build put it.
    let layout_3 = [("GPUMEM_LAYOUT_FOR_A_TEST", "3")];
    let cases = [
        ("restart", &[][..], &[][..]),
        ("takeover", &[][..], &["--bpf-log"][..]),
        ("takeover-layout-3", &layout_3[..], &["--bpf-log"][..]),
    ];
    for (name, first_env, successor) in cases {
        let pins = PinDir::new(&format!("families-{name}"));
        let card = SimCard::new(1 << 40);
        let first = Agent::start_with_env(&[&card.env()[..], first_env].concat(), &pins.run_args());
        let mut w = Workload::spawn(&["--scenario", "families", "--pause"], None, &card.env());
        let all = w.checkpoint();
        assert_eq!(all.checkpoint, "all");
        holds(&first, &all, name);
        let (status, _) = first.stop();
        assert!(status.success(), "{status:?}");
        let second = Agent::start_on(&card, &[&pins.run_args()[..], successor].concat());
        let kept = second.stderr().contains("its slots stay placed as that build placed them");
        assert_eq!(kept, !first_env.is_empty(), "{name}: {}", second.stderr());
        holds(&second, &all, name);
        w.resume();
        let freed = w.checkpoint();
        assert_eq!(freed.checkpoint, "freed");
        holds(&second, &freed, name);
        w.finish();
        second.wait_for_status("the process gone", |s| proc_entry(s, all.pid).is_none_or(|e| e.bytes == 0));
        let (status, _) = second.stop();
        assert!(status.success(), "{status:?}");
        assert!(pins.detach().status.success());
    }
}

/// The agent's ledger and the kernel hold checkpoint `c`, split by kind
/// and device as the workload counts.
fn holds(agent: &Agent, c: &Checkpoint, case: &str) {
    let s =
        agent.wait_for_status(&format!("{case}: the process at {} by kind and device", c.checkpoint), |s| {
            proc_entry(s, c.pid).is_some_and(|e| (e.bytes, e.kernel_bytes) == (c.held, c.held))
                && split_of(s, c.pid) == c.split
        });
    assert_process_holds(&s, c.pid, c.held);
}
