//! The table: each cgroup (its pod `namespace/pod/container`, else its
//! path) on a line of its own, then its processes (`pid comm`), with the
//! bytes each holds in total and by memory kind.
use ratatui::{
    style::{Modifier, Style},
    text::Line,
};

use super::format::{fit, size_or_dash};
use crate::cmd::top::model::{Row, RowKey};

/// Width of each number column.
const NUMBER: usize = 10;

/// The column header, then the rows that fit in `height` lines (the
/// selected one among them, highlighted and marked `>`), each `width`
/// wide.
pub fn lines(
    rows: &[Row<'_>],
    kinds: &[&str],
    selected: usize,
    width: usize,
    height: usize,
) -> Vec<Line<'static>> {
    let numbers = (1 + kinds.len()) * (NUMBER + 1);
    let name_width = width.saturating_sub(numbers + 1).max(8);
    let mut header = format!(" {}", fit("CGROUP/POD     PID COMM", name_width, false));
    header += &format!(" {:>NUMBER$}", "HELD");
    for k in kinds {
        header += &format!(" {:>NUMBER$}", k.to_uppercase());
    }
    let mut out = vec![Line::styled(header, Style::default().add_modifier(Modifier::REVERSED))];
    let shown = height.saturating_sub(1);
    let offset = if shown == 0 { 0 } else { selected.saturating_sub(shown - 1) };
    for (i, row) in rows.iter().enumerate().skip(offset).take(shown) {
        let marker = if i == selected { '>' } else { ' ' };
        let mut text = format!("{marker}{}", name(row, name_width));
        text += &format!(" {:>NUMBER$}", size_or_dash(row.bytes));
        for k in kinds {
            text += &format!(" {:>NUMBER$}", size_or_dash(row.kind_bytes(k)));
        }
        let mut style = Style::default();
        if matches!(row.key, RowKey::Group(_)) {
            style = style.add_modifier(Modifier::BOLD);
        }
        if i == selected {
            style = style.add_modifier(Modifier::REVERSED);
        }
        out.push(Line::styled(text, style));
    }
    if rows.is_empty() {
        out.push(Line::raw(
            "  nothing holds GPU memory that gpumem has seen (or nothing matches the filter)",
        ));
    }
    out
}

/// The name column: a group's label (a path cut at its start), or a
/// process's pid and command, indented under its group.
fn name(row: &Row<'_>, width: usize) -> String {
    match row.key {
        RowKey::Group(_) => {
            let tail = row.name.starts_with('/');
            fit(&row.name, width, tail)
        }
        RowKey::Process(pid) => fit(&format!(" {pid:>7} {}", row.name), width, false),
    }
}
