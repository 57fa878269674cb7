//! Text pieces the panels share: sizes (the project's binary units),
//! ages, columns cut to a width, and the limit bar.
use ratatui::{
    style::{Color, Style},
    text::Span,
};

pub use crate::sink::text::{human, known};

/// A size, or `-` for none (keeps zero columns quiet).
pub fn size_or_dash(bytes: u64) -> String {
    if bytes == 0 {
        "-".into()
    } else {
        human(bytes)
    }
}

/// An age in the largest units that matter: `850ms`, `42s`, `3m05s`,
/// `2h07m`, `3d04h`.
pub fn age(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    match secs {
        0 => format!("{}ms", ns / 1_000_000),
        1..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// `text` in exactly `width` columns: padded, or cut with `…` at the end
/// (or, with `keep_tail`, at the start: a path's last parts say most).
pub fn fit(text: &str, width: usize, keep_tail: bool) -> String {
    let len = text.chars().count();
    if len <= width {
        return format!("{text:<width$}");
    }
    if width == 0 {
        return String::new();
    }
    let kept = width - 1;
    if keep_tail {
        let tail: String = text.chars().skip(len - kept).collect();
        format!("…{tail}")
    } else {
        let head: String = text.chars().take(kept).collect();
        format!("{head}…")
    }
}

/// The colour of a limit's use: green below the soft limit, yellow from
/// it, red at the hard one.
pub fn limit_colour(held: u64, soft: Option<u64>, hard: u64) -> Color {
    if held >= hard {
        Color::Red
    } else if soft.is_some_and(|s| held >= s) {
        Color::Yellow
    } else {
        Color::Green
    }
}

/// A bar `width` columns wide: `[`, `#` for what is held of the hard
/// limit, `.` for the rest, `|` where the soft limit is, `]`.
pub fn bar(held: u64, soft: Option<u64>, hard: u64, width: usize) -> Vec<Span<'static>> {
    let Some(inner) = width.checked_sub(2).filter(|&w| w > 0) else { return Vec::new() };
    let cells = |bytes: u64| -> usize {
        if hard == 0 {
            return if bytes == 0 { 0 } else { inner };
        }
        let c = (u128::from(bytes) * inner as u128).div_ceil(u128::from(hard));
        c.min(inner as u128) as usize
    };
    let filled = cells(held);
    let mark = soft.filter(|&s| s < hard).map(|s| cells(s).min(inner - 1));
    let held_style = Style::default().fg(limit_colour(held, soft, hard));
    let cell = |i: usize| match i {
        _ if Some(i) == mark => ('|', Style::default().fg(Color::Yellow)),
        _ if i < filled => ('#', held_style),
        _ => ('.', Style::default().fg(Color::DarkGray)),
    };
    let mut spans = vec![Span::raw("[")];
    let mut run: Option<(String, Style)> = None;
    for (c, style) in (0..inner).map(cell) {
        match &mut run {
            Some((text, s)) if *s == style => text.push(c),
            _ => spans.extend(run.replace((c.to_string(), style)).map(|(t, s)| Span::styled(t, s))),
        }
    }
    spans.extend(run.map(|(t, s)| Span::styled(t, s)));
    spans.push(Span::raw("]"));
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(spans: &[Span<'_>]) -> String {
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn ages_use_the_largest_units_that_matter() {
        let s = 1_000_000_000;
        let got: Vec<_> = [850_000_000, 42 * s, 185 * s, 7620 * s, 3 * 86_400 * s + 4 * 3600 * s]
            .into_iter()
            .map(age)
            .collect();
        assert_eq!(got, ["850ms", "42s", "3m05s", "2h07m", "3d04h"]);
    }

    #[test]
    fn fit_pads_or_cuts_at_either_end() {
        assert_eq!(fit("abc", 5, false), "abc  ");
        assert_eq!(fit("abcdef", 4, false), "abc…");
        assert_eq!(fit("/a/b/c/job", 6, true), "…c/job");
        assert_eq!(fit("abc", 0, true), "");
    }

    #[test]
    fn bars_fill_to_what_is_held_and_mark_the_soft_limit() {
        assert_eq!(text(&bar(5, None, 10, 12)), "[#####.....]");
        assert_eq!(text(&bar(5, Some(8), 10, 12)), "[#####...|.]");
        assert_eq!(text(&bar(9, Some(4), 10, 12)), "[####|####.]");
        assert_eq!(text(&bar(20, None, 10, 12)), "[##########]", "over the limit: full");
        assert_eq!(text(&bar(0, None, 0, 6)), "[....]");
        assert_eq!(text(&bar(1, None, 0, 6)), "[####]");
        assert!(bar(1, None, 2, 2).is_empty(), "no room");
        assert_eq!(limit_colour(5, Some(4), 10), Color::Yellow);
        assert_eq!(limit_colour(10, Some(4), 10), Color::Red);
        assert_eq!(limit_colour(1, Some(4), 10), Color::Green);
    }
}
