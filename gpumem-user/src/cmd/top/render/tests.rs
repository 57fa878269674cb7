use ratatui::{backend::TestBackend, Terminal};

use super::*;
use crate::{
    cli::SortBy,
    cmd::top::{fixture::report, input::Action},
};

/// The screen `state` draws at `width` x `height`, one string a line.
fn screen(state: &State, width: u16, height: u16) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| _ = draw(f, state)).unwrap();
    let buffer = terminal.backend().buffer();
    buffer.content().chunks(usize::from(width)).map(|l| l.iter().map(|c| c.symbol()).collect()).collect()
}

fn state() -> State {
    let mut s = State::new("/run/gpumem/gpumem.sock".into(), SortBy::Bytes, None);
    s.update(Ok(report()));
    s
}

/// The one line containing `needle` (a test failure shows the screen).
fn line<'a>(screen: &'a [String], needle: &str) -> &'a str {
    let found: Vec<_> = screen.iter().filter(|l| l.contains(needle)).collect();
    assert_eq!(found.len(), 1, "`{needle}` on one line of\n{}", screen.join("\n"));
    found[0]
}

#[test]
fn every_panel_fits_80x24() {
    let s = screen(&state(), 80, 24);
    let header = line(&s, "gpumem top");
    assert_eq!(
        header.trim_end(),
        "gpumem top  records 123456  lost 7  sort bytes  agent /run/gpumem/gpumem.sock"
    );
    assert_eq!(
        line(&s, "GPU 0").trim_end(),
        "GPU 0  NVIDIA H200  used 3.0 GiB / 140.0 GiB  gpumem held 2.0 GiB"
    );
    assert_eq!(line(&s, "GPU 1").trim_end(), "GPU 1  ?  NVML ?  gpumem held 64.0 MiB");
    assert!(line(&s, "LIMITS").contains("held / hard"));
    assert!(line(&s, "LATEST LIMIT DECISIONS").contains("(2 kept)"));
    assert!(line(&s, "OLDEST LIVE ALLOCATIONS").contains("pid 4242 python3  3 live"));
    assert!(s[23].starts_with("q quit  s sort: bytes"), "{}", s[23]);
    assert_eq!(s.len(), 24);
}

#[test]
fn process_rows_show_pid_comm_and_exact_sizes_by_kind() {
    let s = screen(&state(), 80, 24);
    let head = line(&s, "HELD");
    let columns: Vec<_> = head.split_whitespace().collect();
    assert_eq!(columns[columns.len() - 5..], ["HELD", "DEVICE", "MANAGED", "HOST", "VMM"]);
    let python: Vec<_> = line(&s, "  4242 python3").split_whitespace().collect();
    assert_eq!(python, ["4242", "python3", "2.0", "GiB", "2.0", "GiB", "-", "-", "-"]);
    let loader: Vec<_> = line(&s, "  4243 dataloader").split_whitespace().collect();
    assert_eq!(loader, ["4243", "dataloader", "1.0", "GiB", "-", "-", "1.0", "GiB", "-"]);
    let kernel: Vec<_> = line(&s, "  777 jupyter-kernel").split_whitespace().collect();
    assert_eq!(kernel, ["777", "jupyter-kernel", "576.0", "MiB", "-", "512.0", "MiB", "-", "64.0", "MiB"]);
    let pod: Vec<_> = line(&s, "ml/trainer-0/main").split_whitespace().collect();
    assert_eq!(pod, [">ml/trainer-0/main", "3.0", "GiB", "2.0", "GiB", "-", "1.0", "GiB", "-"]);
    let service = line(&s, "slice/jupyter.service");
    assert!(service.starts_with(" …") && service.contains("576.0 MiB"), "a path cut at its start: {service}");
}

#[test]
fn limits_show_target_held_and_hard_beside_a_bar() {
    let s = screen(&state(), 80, 24);
    let pod = line(&s, "cgroup:/kubepods.slice  3.0 GiB / 4.0 GiB");
    let bar = &pod[pod.find('[').unwrap()..=pod.find(']').unwrap()];
    assert!(bar.contains('|') && bar.contains('#') && bar.contains('.'), "held, soft and room: {bar}");
    assert!(
        bar.find('|') > bar.rfind('#').map(|i| i.saturating_sub(2)),
        "the soft limit near the end of held"
    );
    let pid = line(&s, "pid:777  576.0 MiB / 1.0 GiB  dev 1");
    assert!(!pid[pid.find('[').unwrap()..].contains('|'), "no soft limit, no mark: {pid}");
    assert!(pid.trim_end().ends_with("]  env GPUMEM_LIMIT"), "where it came from, after its bar: {pid}");
    assert!(line(&s, "cgroup:/kubepods.slice  3.0 GiB").trim_end().ends_with(']'), "the operator's: nothing");
}

#[test]
fn the_latest_decisions_and_failures_come_newest_first() {
    let s = screen(&state(), 80, 24);
    let decision = s.iter().position(|l| l.contains("limit deny")).expect("the decision");
    let failure = s.iter().position(|l| l.contains("alloc_failed")).expect("the failure");
    assert!(decision < failure);
    let decision_text = "    2s  limit deny  pid 4242 python3  2.0 GiB  cgroup:/kubepods.slice  cuMem";
    assert!(s[decision].starts_with(decision_text), "{}", s[decision]);
    let failure_text = " 1m05s  alloc_failed CUresult 2  pid 777 jupyter-kernel  80.0 GiB  dev 1  cuMem";
    assert!(s[failure].starts_with(failure_text), "{}", s[failure]);
    let wide = screen(&state(), 120, 24);
    assert!(line(&wide, "limit deny").trim_end().ends_with("cuMemAlloc_v2  3.0 GiB / 4.0 GiB"));
}

#[test]
fn the_oldest_allocations_follow_the_selection() {
    let mut st = state();
    let s = screen(&st, 80, 24);
    let oldest = line(&s, "1h02m old");
    assert!(
        oldest.contains("1.0 GiB") && oldest.contains("device") && oldest.contains("cuMemAlloc_v2"),
        "{oldest}"
    );
    assert!(oldest.contains("0x7f0000000000"));
    assert!(line(&s, "ml/trainer-0/main").starts_with('>'), "the selected row is marked");
    st.apply(Action::End);
    let s = screen(&st, 80, 24);
    assert!(line(&s, "  777 jupyter-kernel").starts_with('>'));
    assert!(line(&s, "ml/trainer-0/main").starts_with(' '));
    assert!(line(&s, "OLDEST LIVE ALLOCATIONS").contains("pid 777 jupyter-kernel  2 live"));
    assert!(line(&s, "1m30s old").contains("512.0 MiB  managed dev 1  cuMemAllocManaged"));
}

#[test]
fn filtering_and_typing_show_in_the_table_and_footer() {
    let mut st = state();
    st.apply(Action::StartFilter);
    st.apply(Action::Type('j'));
    let s = screen(&st, 80, 24);
    assert!(s[23].starts_with("filter: j_"), "{}", s[23]);
    for c in "upyter".chars() {
        st.apply(Action::Type(c));
    }
    st.apply(Action::ApplyFilter);
    let s = screen(&st, 80, 24);
    assert!(s[0].contains("filter jupyter"));
    assert!(s.iter().all(|l| !l.contains("python3  ") || l.contains("limit deny")), "python3 filtered out");
    line(&s, "  777 jupyter-kernel");
}

#[test]
fn an_unreachable_agent_is_said_on_screen() {
    let mut st = State::new("/tmp/none.sock".into(), SortBy::Bytes, None);
    let s = screen(&st, 80, 24);
    line(&s, "asking the gpumem agent at /tmp/none.sock");
    st.update(Err("cannot reach the gpumem agent at /tmp/none.sock: No such file".into()));
    let s = screen(&st, 80, 24);
    assert!(s.iter().filter(|l| l.contains("cannot reach the gpumem agent")).count() >= 1);
    line(&s, "gpumem top keeps asking");
    let mut st = state();
    st.update(Err("cannot reach the gpumem agent".into()));
    let s = screen(&st, 80, 24);
    let footer = "no answer from the agent, retrying (the last answer shown): cannot";
    assert!(s[23].starts_with(footer), "{}", s[23]);
    line(&s, "  4242 python3");
}

#[test]
fn long_tables_scroll_to_the_selection() {
    let mut st = state();
    st.apply(Action::End);
    let s = screen(&st, 80, 17);
    line(&s, "  777 jupyter-kernel");
    assert!(!s.iter().any(|l| l.contains("ml/trainer-0/main")), "scrolled past the top:\n{}", s.join("\n"));
}

#[test]
fn any_size_draws_without_panicking() {
    let st = state();
    for (w, h) in [(1, 1), (10, 3), (40, 10), (80, 24), (200, 60), (0, 0)] {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
        terminal.draw(|f| _ = draw(f, &st)).unwrap();
    }
}
