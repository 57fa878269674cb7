//! The small panels: the header, the devices, the limits and the footer.
use ratatui::{
    style::{Color, Modifier, Style},
    text::{Line, Span},
};

use super::format::{bar, human, known, limit_colour};
use crate::{
    cmd::top::{model::DeviceRow, state::State},
    output::LimitStatus,
};

/// A panel's title line.
pub fn title(text: String) -> Line<'static> {
    Line::styled(text, Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD))
}

/// `gpumem top`, records applied and lost, the sort and filter, the
/// agent's socket (last: the longest).
pub fn header(state: &State) -> Line<'static> {
    let mut text = "gpumem top".to_string();
    if let Some(r) = &state.report {
        let s = &r.status;
        text += &format!("  records {}  lost {}", s.records, s.dropped);
    }
    text += &format!("  sort {}", state.sort.name());
    if let Some(f) = &state.filter {
        text += &format!("  filter {f}");
    }
    text += &format!("  agent {}", state.agent);
    Line::styled(text, Style::default().add_modifier(Modifier::REVERSED))
}

/// One line per device: NVML's name, used and total where it says, and
/// what gpumem counts held in the device's memory.
pub fn devices(rows: &[DeviceRow<'_>], nvml: bool) -> Vec<Line<'static>> {
    if rows.is_empty() {
        let why = if nvml { "none" } else { "none known yet (NVML not loaded)" };
        return vec![Line::raw(format!("devices: {why}"))];
    }
    rows.iter()
        .map(|d| {
            let nvml = match (d.used, d.total) {
                (None, None) => "NVML ?".to_string(),
                (used, total) => format!("used {} / {}", known(used), known(total)),
            };
            let name = d.name.unwrap_or("?");
            Line::raw(format!("GPU {}  {name}  {nvml}  gpumem held {}", d.index, human(d.held)))
        })
        .collect()
}

/// The limits' title, then up to `shown` limits as `TARGET  HELD / HARD`
/// with a bar beside: `#` held, `|` the soft limit, the end the hard one.
pub fn limits(list: &[LimitStatus], shown: usize, width: usize) -> Vec<Line<'static>> {
    let more = list.len().saturating_sub(shown);
    let head = match (list.len(), more) {
        (0, _) => "LIMITS  none".to_string(),
        (_, 0) => "LIMITS  held / hard  [# held, | soft]".to_string(),
        (_, m) => format!("LIMITS  held / hard  [# held, | soft]  (+{m} more)"),
    };
    let texts: Vec<String> = list
        .iter()
        .take(shown)
        .map(|l| {
            let device = l.device.map(|d| format!("  dev {d}")).unwrap_or_default();
            format!("{}  {} / {}{device}", l.target, human(l.usage), human(l.hard))
        })
        .collect();
    let column = texts.iter().map(|t| t.chars().count()).max().unwrap_or(0).min(width * 3 / 5);
    // Where a limit came from, after its bar, in at most a third of the
    // width (cut at its end).
    let sources = list.iter().take(shown).filter_map(|l| l.source.as_ref());
    let note = sources.map(|s| s.chars().count() + 2).max().unwrap_or(0).min(width / 3);
    let bar_width = width.saturating_sub(column + 2 + note).min(40);
    let mut lines = vec![title(head)];
    for (l, text) in list.iter().zip(texts) {
        let colour = Style::default().fg(limit_colour(l.usage, l.soft, l.hard));
        let mut spans = vec![Span::styled(format!("{text:<column$}  "), colour)];
        spans.extend(bar(l.usage, l.soft, l.hard, bar_width));
        if let Some(source) = &l.source {
            let cut: String = source.chars().take(note.saturating_sub(2)).collect();
            spans.push(Span::styled(format!("  {cut}"), Style::default().fg(Color::DarkGray)));
        }
        lines.push(Line::from(spans));
    }
    lines
}

/// The last line: the filter being typed, the agent's error (where the
/// last answer is shown; without one, [`waiting`] says it), or the keys.
pub fn footer(state: &State) -> Line<'static> {
    if let Some(typing) = &state.typing {
        return Line::raw(format!("filter: {typing}_   Enter apply  Esc cancel"));
    }
    if let Some(e) = state.error.as_ref().filter(|_| state.report.is_some()) {
        let text = format!("no answer from the agent, retrying (the last answer shown): {e}");
        return Line::styled(text, Style::default().fg(Color::Red));
    }
    let next = state.sort.next();
    Line::styled(
        format!(
            "q quit  s sort: {} (next {})  / filter  Up/Down PgUp/PgDn select",
            state.sort.name(),
            next.name()
        ),
        Style::default().fg(Color::DarkGray),
    )
}

/// Where the agent has not answered yet: why, or that it is being asked.
pub fn waiting(state: &State) -> Vec<Line<'static>> {
    let mut lines = vec![Line::raw("")];
    match &state.error {
        Some(e) => {
            lines.push(Line::styled(e.clone(), Style::default().fg(Color::Red)));
            lines.push(Line::raw(""));
            lines.push(Line::raw("gpumem top keeps asking; start the agent with `gpumem run` (as root),"));
            lines.push(Line::raw("or pass --socket PATH where it listens. q quits."));
        }
        None => lines.push(Line::raw(format!("asking the gpumem agent at {} ...", state.agent))),
    }
    lines
}
