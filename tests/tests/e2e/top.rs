//! `gpumem top` in a real terminal (tmux, 80x24) against the real agent:
//! the screen shows the device as NVML (the simulated one, reading the
//! simulated card) and gpumem see it, each process and cgroup with the
//! bytes its workload holds, the limit's held and hard figures, the latest limit decision and
//! out-of-memory refusal, the oldest live allocations of the process
//! holding most; it follows frees within its refresh; filter, sort and
//! `q` work as keys. (A decision's target is cut at the screen's edge:
//! the test's cgroup names are long.)
use gpumem_tests::harness::*;

const MIB: u64 = 1 << 20;

/// The screen's line that contains every one of `parts`, if one does.
fn row<'a>(screen: &'a str, parts: &[&str]) -> Option<&'a str> {
    screen.lines().find(|l| parts.iter().all(|p| l.contains(p)))
}

/// The screen's first line: what top shows, sorted and filtered how.
fn header(screen: &str) -> &str {
    screen.lines().next().unwrap_or_default()
}

/// The table's row of process `pid` (`PID COMM ... HELD ...`, `>` marking
/// the selected row), if it shows; other panels name processes as `pid N`.
fn process_row<'a>(screen: &'a str, pid: &str) -> Option<&'a str> {
    let start = format!("{pid} gpumem-workload ");
    screen.lines().find(|l| l.trim_start_matches(['>', ' ']).starts_with(&start))
}

#[test]
fn top_shows_what_each_workload_holds_and_answers_its_keys() {
    if !privileged() {
        return;
    }
    let Some(tmux) = Tmux::available() else { return };
    let (team, other) = (Cgroup::create("top-team"), Cgroup::create("top-other"));
    // A 32 MiB card: 7 x 3 MiB in `team` (the 6th crosses the soft limit)
    // and two contexts of 2 MiB leave `other` 7 MiB, then it is refused.
    let card = SimCard::new(32 * MIB);
    let agent =
        Agent::start_on(&card, &["--limit", &format!("cgroup:{}=64MiB,soft=16MiB,action=audit", team.path)]);
    let (size, n) = ((3 * MIB).to_string(), "7");
    let mut holder = Workload::spawn(
        &["--scenario", "hold", "--size", &size, "--iterations", n, "--pause"],
        Some(&team),
        &card.env(),
    );
    // The filler starts once the holder holds its 21 MiB.
    let held = holder.checkpoint();
    let mut filler = Workload::spawn(
        &["--scenario", "oom", "--size", &MIB.to_string(), "--pause"],
        Some(&other),
        &card.env(),
    );
    let full = filler.checkpoint();
    assert_eq!((held.held, full.held, full.failed), (21 * MIB, 7 * MIB, 1));
    agent.wait_for_checkpoint(&held);
    agent.wait_for_checkpoint(&full);
    let (hp, fp) = (holder.pid().to_string(), filler.pid().to_string());
    let (hp, fp) = (hp.as_str(), fp.as_str());
    let top = paths().agent;
    tmux.start(80, 24, &[top.to_str().unwrap(), "top", "--socket", agent.socket.to_str().unwrap()]);
    let limit = format!("cgroup:{}", team.path);
    let (hpid, fpid) = (format!("pid {hp}"), format!("pid {fp}"));
    // Each check on one whole frame (a screen read while top draws may
    // show half of one: it is read again).
    let first: [&[&str]; 6] = [
        &["GPU 0", "simcuda device 0", "used 32.0 MiB / 32.0 MiB", "gpumem held 28.0 MiB"],
        &[&limit, "21.0 MiB / 64.0 MiB"],
        &["limit_soft audit", &hpid, "3.0 MiB", "cgroup:/"],
        &["alloc_failed CUresult 2", &fpid, "1.0 MiB", "dev 0"],
        &["OLDEST LIVE ALLOCATIONS", &hpid, "7 live"],
        &["3.0 MiB", "device", "dev 0", "cuMemAlloc_v2"],
    ];
    let screen = tmux.wait_for_screen("the workloads, the limit and the latest decisions", |s| {
        process_row(s, hp).is_some_and(|r| r.contains("21.0 MiB"))
            && process_row(s, fp).is_some_and(|r| r.contains("7.0 MiB"))
            && first.iter().all(|parts| row(s, parts).is_some())
    });
    assert_eq!(screen.lines().count(), 24, "{screen}");

    filter_and_sort(&tmux, hp, fp, other.path.trim_start_matches('/'));

    // A free shows within a refresh: the holder frees everything.
    holder.resume();
    assert_eq!(holder.checkpoint().held, 0);
    tmux.wait_for_screen("the holder holding nothing", |s| {
        process_row(s, hp).is_some_and(|r| !r.contains("MiB"))
            && row(s, &[&limit, "0 B / 64.0 MiB"]).is_some()
            && process_row(s, fp).is_some_and(|r| r.contains("7.0 MiB"))
    });
    tmux.keys(&["q"]);
    wait_until("top to quit on q", || !tmux.running());
    holder.run_to_end();
    filler.run_to_end();
}

/// `/` and a filter that only `other_name` passes, Enter, then Esc to clear
/// it and `s` to sort by pid: each seen on screen.
fn filter_and_sort(tmux: &Tmux, hp: &str, fp: &str, other_name: &str) {
    // Only `other` passes the filter.
    tmux.keys(&["/"]);
    tmux.type_text(other_name);
    tmux.keys(&["Enter"]);
    tmux.wait_for_screen("the filter applied", |s| {
        header(s).contains(&format!("filter {other_name}"))
            && process_row(s, hp).is_none()
            && process_row(s, fp).is_some_and(|r| r.contains("7.0 MiB"))
    });
    // Esc clears the filter (and a key right after a lone Esc would read
    // as Alt+key: wait for the screen first).
    tmux.keys(&["Escape"]);
    tmux.wait_for_screen("the filter cleared", |s| {
        process_row(s, hp).is_some() && !header(s).contains("filter")
    });
    tmux.keys(&["s"]);
    tmux.wait_for_screen("sorted by pid, unfiltered", |s| {
        header(s).contains("sort pid") && process_row(s, hp).is_some() && !header(s).contains("filter")
    });
}
