use super::*;
use crate::cmd::top::fixture::report;

fn state() -> State {
    let mut s = State::new("/run/gpumem/gpumem.sock".into(), SortBy::Bytes, None);
    s.update(Ok(report()));
    s
}

fn selected(s: &State) -> RowKey {
    s.rows()[s.selected].key
}

#[test]
fn the_selection_stays_on_its_process_when_the_order_changes() {
    let mut s = state();
    s.apply(Action::Down);
    assert_eq!(selected(&s), RowKey::Process(4242));
    s.apply(Action::Sort);
    assert_eq!(s.sort, SortBy::Pid);
    assert_eq!(selected(&s), RowKey::Process(4242));
    assert_eq!(s.selected, 3, "group 200 and 777 now come first");
    s.update(Ok(report()));
    assert_eq!(selected(&s), RowKey::Process(4242), "and across refreshes");
}

#[test]
fn moving_stops_at_either_end() {
    let mut s = state();
    s.page = 2;
    s.apply(Action::Up);
    assert_eq!(s.selected, 0);
    s.apply(Action::PageDown);
    assert_eq!(s.selected, 2);
    s.apply(Action::PageDown);
    s.apply(Action::PageDown);
    assert_eq!(s.selected, 4, "the last row");
    s.apply(Action::Down);
    assert_eq!(s.selected, 4);
    s.apply(Action::Home);
    assert_eq!(s.selected, 0);
    s.apply(Action::End);
    assert_eq!(selected(&s), RowKey::Process(777));
}

#[test]
fn a_filter_is_typed_then_applied_or_cleared() {
    let mut s = state();
    s.apply(Action::StartFilter);
    for c in "jupyterX".chars() {
        s.apply(Action::Type(c));
    }
    s.apply(Action::Erase);
    assert_eq!(s.typing.as_deref(), Some("jupyter"));
    assert_eq!(s.rows().len(), 5, "not applied while typed");
    s.apply(Action::ApplyFilter);
    assert_eq!((s.filter.as_deref(), s.typing.as_deref()), (Some("jupyter"), None));
    assert_eq!(s.rows().len(), 2);
    assert_eq!(s.selected, 0, "the selection is kept within the rows");
    s.apply(Action::StartFilter);
    assert_eq!(s.typing.as_deref(), Some("jupyter"), "the filter to edit");
    s.apply(Action::CancelTyping);
    assert_eq!(
        (s.filter.as_deref(), s.typing.as_deref()),
        (Some("jupyter"), None),
        "Esc while typing keeps it"
    );
    s.apply(Action::ClearFilter);
    assert_eq!((s.filter.as_deref(), s.typing.as_deref(), s.rows().len()), (None, None, 5));
    assert_eq!(s.apply(Action::Quit), Flow::Quit);
}

#[test]
fn the_focus_is_the_selected_process_or_the_first_of_a_selected_group() {
    let mut s = state();
    let focus = |s: &State| s.focus().map(|(p, a)| (p.pid, a.map(|a| a.live)));
    assert_eq!(focus(&s), Some((Some(4242), Some(3))), "group 100 selected: its first process");
    s.apply(Action::End);
    assert_eq!(focus(&s), Some((Some(777), Some(2))));
    s.apply(Action::Up);
    assert_eq!(focus(&s), Some((Some(777), Some(2))), "group 200: its process");
    s.apply(Action::Up);
    assert_eq!(focus(&s), Some((Some(4243), None)), "no allocations listed for it");
}

#[test]
fn an_error_keeps_the_last_answer_and_a_success_clears_it() {
    let mut s = state();
    s.update(Err("cannot reach the gpumem agent".into()));
    assert!(s.report.is_some() && s.error.is_some());
    s.update(Ok(report()));
    assert!(s.error.is_none());
    let mut fresh = State::new("x".into(), SortBy::Name, Some(String::new()));
    assert_eq!(fresh.filter, None, "an empty --filter is none");
    fresh.update(Err("down".into()));
    assert!(fresh.rows().is_empty() && fresh.focus().is_none());
    fresh.apply(Action::Down);
    assert_eq!(fresh.selected, 0);
}
