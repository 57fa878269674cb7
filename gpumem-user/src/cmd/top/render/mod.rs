//! Drawing the view into any ratatui frame (a terminal, or a test's
//! buffer). Top to bottom, for 80x24 and up: the header, the devices, the
//! limits, the table of cgroups and processes (what grows with the
//! screen), the latest decisions and failures, the oldest live
//! allocations of the selected process, the footer.
mod activity;
mod format;
mod panels;
mod table;

use ratatui::{
    layout::{Constraint, Layout, Rect},
    widgets::{Paragraph, Wrap},
    Frame,
};

use super::{model, state::State};

/// Devices, limits, decisions and allocations shown at most.
const DEVICES: usize = 2;
const LIMITS: usize = 3;
const RECENT: usize = 3;
const OLDEST: usize = 3;

/// Draws `state` into `frame`; returns how many rows the table showed (a
/// page, for PageUp and PageDown).
pub fn draw(frame: &mut Frame<'_>, state: &State) -> usize {
    let area = frame.area();
    let Some(report) = &state.report else {
        let [head, body, foot] = rows(area, [1, 0, 1]);
        frame.render_widget(Paragraph::new(panels::header(state)), head);
        frame.render_widget(Paragraph::new(panels::waiting(state)).wrap(Wrap { trim: false }), body);
        frame.render_widget(Paragraph::new(panels::footer(state)), foot);
        return 0;
    };
    let width = usize::from(area.width);
    let devices = panels::devices(&model::devices(report), report.status.nvml);
    let devices = &devices[..devices.len().min(DEVICES)];
    let limits = panels::limits(&report.limits, LIMITS, width);
    let recent = activity::recent(report, RECENT);
    let oldest = activity::oldest(state.focus(), OLDEST);
    let heights = [1, devices.len(), limits.len(), 0, recent.len(), oldest.len(), 1];
    let [head, dev, lim, body, rec, old, foot] = rows(area, heights);
    let table_rows = state.rows();
    let kinds = model::kinds_in_use(&table_rows);
    let height = usize::from(body.height);
    let table = table::lines(&table_rows, &kinds, state.selected, width, height);
    frame.render_widget(Paragraph::new(panels::header(state)), head);
    frame.render_widget(Paragraph::new(devices.to_vec()), dev);
    frame.render_widget(Paragraph::new(limits), lim);
    frame.render_widget(Paragraph::new(table), body);
    frame.render_widget(Paragraph::new(recent), rec);
    frame.render_widget(Paragraph::new(oldest), old);
    frame.render_widget(Paragraph::new(panels::footer(state)), foot);
    height.saturating_sub(1)
}

/// `area` cut into rows of these heights, the one of height 0 taking what
/// is left (at least 3 lines, where the screen has them).
fn rows<const N: usize>(area: Rect, heights: [usize; N]) -> [Rect; N] {
    let constraints = heights.map(|h| match h {
        0 => Constraint::Min(3),
        h => Constraint::Length(u16::try_from(h).unwrap_or(u16::MAX)),
    });
    Layout::vertical(constraints).areas(area)
}

#[cfg(test)]
mod tests;
