//! How the probes are linked: multi-uprobe links (one per program and
//! library) where the kernel has them, single ones where it has not or
//! where asked; a stop leaves no link of the agent's in the kernel either
//! way, and what goes through the links is counted exactly.
use gpumem_tests::harness::*;

/// What the agent said it attached, over every library (`attached N
/// probe(s) (R with a return probe) to PATH[ through M multi-uprobe
/// links]`: the simulated driver, and NVML where one is found).
struct Said {
    probes: usize,
    /// Entry and return probe sites: N + R.
    sites: usize,
    multi: usize,
}

fn said_attached(agent: &Agent) -> Said {
    let stderr = agent.stderr();
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(" with a return probe) to ")).collect();
    assert!(!lines.is_empty(), "{stderr}");
    let number_after = |line: &str, word: &str| -> Option<usize> {
        let at = line.find(word)? + word.len();
        line[at..].split_whitespace().next()?.parse().ok()
    };
    lines.iter().fold(Said { probes: 0, sites: 0, multi: 0 }, |s, line| {
        let n = number_after(line, "attached ").unwrap_or_else(|| panic!("{line}"));
        let returns = number_after(line, "probe(s) (").unwrap_or_else(|| panic!("{line}"));
        Said {
            probes: s.probes + n,
            sites: s.sites + n + returns,
            multi: s.multi + number_after(line, " through ").unwrap_or(0),
        }
    })
}

/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("reading the kernel release");
    let mut parts = release.trim().split(['.', '-', '+']).map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The agent's uprobe links now; a workload's allocations counted exactly
/// through them; after SIGINT none of them is left in the kernel. Also
/// what the agent said, whole.
fn traces_exactly_and_detaches_all(agent: Agent) -> (Vec<BpfLink>, String) {
    let links: Vec<BpfLink> = links_of(agent.pid())
        .into_iter()
        .filter(|l| l.kind != "raw_tracepoint" && l.kind != "tracing")
        .collect();
    let cg = Cgroup::create("links");
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(&cg), &[]);
    let (pid, c) = (w.pid(), w.checkpoint());
    agent.wait_for_checkpoint(&c);
    assert_process_holds(&agent.status(), pid, c.held);
    w.resume();
    w.finish();
    agent.wait_for_exit(pid);
    let stderr = agent.stderr();
    let (status, _) = agent.stop();
    assert!(status.success(), "the agent stopped with {status}");
    let left: Vec<_> = links.iter().filter(|l| link_exists(l.id)).collect();
    assert!(left.is_empty(), "links left in the kernel after the stop: {left:?}");
    (links, stderr)
}

#[test]
fn multi_links_hold_every_probe_where_the_kernel_has_them_and_a_stop_leaves_none() {
    if !privileged() {
        return;
    }
    let refusal = multi_link_refusal();
    let version = kernel_version();
    assert!(
        version < (6, 6) || refusal.is_none(),
        "kernel {version:?} has multi-uprobe links, yet gpumem probe says: {refusal:?}"
    );
    let agent = Agent::start(&[]);
    let Said { probes, sites, multi } = said_attached(&agent);
    assert!(probes < sites && sites < 2 * probes, "frees have no return probe, the others one");
    let (links, stderr) = traces_exactly_and_detaches_all(agent);
    match refusal {
        None => {
            assert!(links.iter().all(BpfLink::is_multi_uprobe), "{links:?}");
            assert_eq!(links.len(), multi, "one descriptor per link said; the agent said:\n{stderr}");
            match links.iter().map(|l| l.probes).sum::<Option<usize>>() {
                Some(held) => assert_eq!(held, sites, "each probe's entry and return, once: {links:?}"),
                None => println!("this kernel's fdinfo does not count a multi link's probes (6.18 and 7.x do): links checked by kind and number"),
            }
            assert!(multi < probes, "{multi} links for {probes} probes");
        }
        Some(why) => {
            println!("this kernel has no multi-uprobe links ({why}): single links, checked as such");
            assert_eq!(multi, 0);
            assert!(!links.iter().any(BpfLink::is_multi_uprobe), "{links:?}");
            assert_eq!(links.len(), sites, "{links:?}; the agent said:\n{stderr}");
        }
    }
}

#[test]
fn single_links_on_request_and_multi_refused_by_name_where_the_kernel_has_none() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&["--uprobe-links", "single"]);
    let Said { sites, multi, .. } = said_attached(&agent);
    assert_eq!(multi, 0);
    let (links, stderr) = traces_exactly_and_detaches_all(agent);
    assert!(!links.iter().any(BpfLink::is_multi_uprobe), "{links:?}");
    assert_eq!(links.len(), sites, "one link per entry and return: {links:?}; the agent said:\n{stderr}");
    match multi_link_refusal() {
        None => {
            let agent = Agent::start(&["--uprobe-links", "multi"]);
            assert!(said_attached(&agent).multi > 0);
        }
        Some(_) => {
            let (status, stderr) = Agent::start_failing(&["--uprobe-links", "multi"]);
            assert!(!status.success());
            assert!(
                stderr.contains("multi-uprobe links") && stderr.contains("--uprobe-links single"),
                "{stderr}"
            );
        }
    }
}

#[test]
fn auto_falls_back_to_single_links_when_the_kernel_refuses_the_multi_link_programs() {
    if !privileged() {
        return;
    }
    if let Some(why) = multi_link_refusal() {
        println!(
            "this kernel has no multi-uprobe links ({why}): auto takes single links without trying multi"
        );
        return;
    }
    // The costliest program refused as the verifier would refuse it.
    let refuse = [("GPUMEM_REFUSE_MULTI", "alloc_return")];
    let agent = Agent::start_with_env(&refuse, &[]);
    let Said { sites, multi, .. } = said_attached(&agent);
    let (links, stderr) = traces_exactly_and_detaches_all(agent);
    assert!(
        stderr.contains("--uprobe-links auto: the programs could not be loaded for multi-uprobe links"),
        "{stderr}"
    );
    assert!(stderr.contains("`alloc_return`") && stderr.contains("refused for a test"), "{stderr}");
    assert_eq!(multi, 0, "{stderr}");
    assert!(!links.iter().any(BpfLink::is_multi_uprobe), "{links:?}");
    assert_eq!(links.len(), sites, "one link per entry and return: {links:?}; the agent said:\n{stderr}");

    // With --persist, the pins made for the multi-link build go with it:
    // one build's stay, the single-link one's, which the next agent adopts.
    let pins = PinDir::new("links-fallback");
    let agent = Agent::start_with_env(&refuse, &pins.run_args());
    let builds = pins.builds();
    assert_eq!(builds.len(), 1, "{builds:?}");
    let (status, _) = agent.stop();
    assert!(status.success(), "{status:?}");
    let agent = Agent::start_with_env(&refuse, &pins.run_args());
    assert!(agent.stderr().contains("adopted the gpumem state pinned at"), "{}", agent.stderr());
    assert_eq!(pins.builds(), builds);
    let (status, _) = agent.stop();
    assert!(status.success(), "{status:?}");
}
