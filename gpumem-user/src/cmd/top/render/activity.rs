//! What happened and what stays: the latest limit decisions and failed
//! allocations (newest first, with how long ago), and the oldest live allocations of one
//! process (what it has held longest: leaks show here).
use ratatui::{
    style::{Color, Style},
    text::Line,
};

use super::{
    format::{age, human},
    panels::title,
};
use crate::output::{ProcessAllocations, RecentEvent, RecentKind, StatusEntry, TopReport};

/// The title, then the newest `shown` decisions and failures.
pub fn recent(report: &TopReport, shown: usize) -> Vec<Line<'static>> {
    let head = if report.recent.is_empty() {
        "LATEST LIMIT DECISIONS AND FAILED ALLOCATIONS  none yet".to_string()
    } else {
        format!("LATEST LIMIT DECISIONS AND FAILED ALLOCATIONS  ({} kept)", report.recent.len())
    };
    let mut lines = vec![title(head)];
    for e in report.recent.iter().rev().take(shown) {
        let colour = match (e.event, e.action.as_deref()) {
            (RecentKind::LimitSoft, _) | (RecentKind::Limit, Some("audit")) => Color::Yellow,
            _ => Color::Red,
        };
        let text = format!("{:>6}  {}", age(report.now_ns.saturating_sub(e.ts_ns)), event(e));
        lines.push(Line::styled(text, Style::default().fg(colour)));
    }
    lines
}

/// `limit deny  pid 42 job  1.0 GiB  cgroup:/a  cuMemAlloc_v2  7.5 GiB / 8.0 GiB`
/// or `alloc_failed CUresult 2  pid 42 job  1.0 GiB  dev 0  cuMemAlloc_v2`:
/// what matters most first (a narrow screen cuts the end).
fn event(e: &RecentEvent) -> String {
    let who = format!("pid {} {}  {}", e.pid, e.comm, human(e.bytes));
    match e.event {
        RecentKind::AllocFailed => {
            let device = e.device.map_or("?".to_string(), |d| d.to_string());
            format!("alloc_failed CUresult {}  {who}  dev {device}  {}", e.result.unwrap_or(0), e.api)
        }
        RecentKind::Limit | RecentKind::LimitSoft => {
            let usage = match (e.usage, e.limit_bytes) {
                (Some(u), Some(l)) => format!("  {} / {}", human(u), human(l)),
                _ => String::new(),
            };
            let (action, limit) = (e.action.as_deref().unwrap_or("?"), e.limit.as_deref().unwrap_or("?"));
            format!("{} {action}  {who}  {limit}  {}{usage}", e.event.name(), e.api)
        }
    }
}

/// The title (the process and how many live allocations it holds), then
/// its `shown` oldest: age, size, kind, device, the entry point, address.
pub fn oldest(
    focus: Option<(&StatusEntry, Option<&ProcessAllocations>)>,
    shown: usize,
) -> Vec<Line<'static>> {
    let Some((p, allocations)) = focus else {
        return vec![title("OLDEST LIVE ALLOCATIONS  no process".into())];
    };
    let live = allocations.map_or(0, |a| a.live);
    let comm = p.comm.as_deref().unwrap_or("?");
    let head = format!("OLDEST LIVE ALLOCATIONS  pid {} {comm}  {live} live", p.pid.unwrap_or(0));
    let mut lines = vec![title(head)];
    for a in allocations.iter().flat_map(|a| &a.oldest).take(shown) {
        let device = a.device.map_or("?".to_string(), |d| d.to_string());
        lines.push(Line::raw(format!(
            "{:>8} old  {:>10}  {:<7} dev {device}  {}  {}",
            age(a.age_ns),
            human(a.size),
            a.kind,
            a.api,
            a.addr
        )));
    }
    lines
}
