//! The view's state: the agent's latest answer (or why there is none),
//! the sort, the filter, what is being typed, and the selected row (kept
//! on the same process or cgroup across refreshes).
use super::{
    input::Action,
    model::{self, Row, RowKey},
};
use crate::{
    cli::SortBy,
    output::{ProcessAllocations, StatusEntry, TopReport},
};

/// Whether to go on after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
}

#[derive(Debug, Clone)]
pub struct State {
    /// The agent's socket, as the header names it.
    pub agent: String,
    /// The latest answer (kept, shown, while the agent does not answer).
    pub report: Option<TopReport>,
    /// Why the latest request failed; None once one succeeds.
    pub error: Option<String>,
    pub sort: SortBy,
    pub filter: Option<String>,
    /// The filter being typed, while it is.
    pub typing: Option<String>,
    /// The selected row's index in [`State::rows`].
    pub selected: usize,
    selected_key: Option<RowKey>,
    /// Rows a page scrolls (the table's height as last drawn).
    pub page: usize,
}

impl State {
    pub fn new(agent: String, sort: SortBy, filter: Option<String>) -> Self {
        let filter = filter.filter(|f| !f.is_empty());
        Self {
            agent,
            report: None,
            error: None,
            sort,
            filter,
            typing: None,
            selected: 0,
            selected_key: None,
            page: 10,
        }
    }

    /// The table as sorted and filtered now.
    pub fn rows(&self) -> Vec<Row<'_>> {
        self.report.as_ref().map_or_else(Vec::new, |r| model::rows(r, self.sort, self.filter.as_deref()))
    }

    /// The agent's answer, or why there is none.
    pub fn update(&mut self, answer: Result<TopReport, String>) {
        match answer {
            Ok(report) => {
                self.report = Some(report);
                self.error = None;
            }
            Err(why) => self.error = Some(why),
        }
        self.reselect();
    }

    /// Applies `action`.
    pub fn apply(&mut self, action: Action) -> Flow {
        let last = self.rows().len().saturating_sub(1);
        let page = self.page.max(1);
        match action {
            Action::Quit => return Flow::Quit,
            Action::Sort => self.sort = self.sort.next(),
            Action::StartFilter => self.typing = Some(self.filter.clone().unwrap_or_default()),
            Action::Type(c) => self.typing.get_or_insert_with(String::new).push(c),
            Action::Erase => {
                self.typing.as_mut().and_then(String::pop);
            }
            Action::ApplyFilter => self.filter = self.typing.take().filter(|f| !f.is_empty()),
            Action::CancelTyping => self.typing = None,
            Action::ClearFilter => (self.typing, self.filter) = (None, None),
            Action::Up => return self.select(self.selected.saturating_sub(1)),
            Action::Down => return self.select((self.selected + 1).min(last)),
            Action::PageUp => return self.select(self.selected.saturating_sub(page)),
            Action::PageDown => return self.select((self.selected + page).min(last)),
            Action::Home => return self.select(0),
            Action::End => return self.select(last),
        }
        self.reselect();
        Flow::Continue
    }

    fn select(&mut self, index: usize) -> Flow {
        self.selected = index;
        self.selected_key = self.rows().get(index).map(|r| r.key);
        Flow::Continue
    }

    /// After the rows changed: the same process or cgroup if it is still
    /// shown, else the same place.
    fn reselect(&mut self) {
        let rows = self.rows();
        let found = self.selected_key.and_then(|k| rows.iter().position(|r| r.key == k));
        let index = found.unwrap_or(self.selected).min(rows.len().saturating_sub(1));
        let key = rows.get(index).map(|r| r.key);
        (self.selected, self.selected_key) = (index, key);
    }

    /// The process whose oldest allocations are shown: the selected one,
    /// the first of a selected cgroup, else the one holding the most.
    pub fn focus(&self) -> Option<(&StatusEntry, Option<&ProcessAllocations>)> {
        let report = self.report.as_ref()?;
        let rows = self.rows();
        let picked = rows.get(self.selected).and_then(|r| r.pid()).or_else(|| {
            let next = rows.get(self.selected + 1)?;
            matches!(rows.get(self.selected)?.key, RowKey::Group(_)).then_some(next.pid()).flatten()
        });
        let processes = &report.status.processes;
        let entry = match picked {
            Some(pid) => processes.iter().find(|p| p.pid == Some(pid)),
            None => processes
                .iter()
                .filter(|p| p.pid.is_some())
                .max_by_key(|p| (p.bytes, std::cmp::Reverse(p.pid))),
        }?;
        Some((entry, report.oldest.iter().find(|a| Some(a.pid) == entry.pid)))
    }
}

#[cfg(test)]
mod tests;
