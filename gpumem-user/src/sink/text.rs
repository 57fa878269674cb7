//! A line per record for people watching a terminal.
use std::io::{self, Write};

use super::{pending::Pending, Sink};
use crate::output::{
    declared::DeclaredLine, Caller, DroppedLine, EventLine, Holder, Holders, LimitLine, Line, RecordEvent,
    SplitLine, UsageLine,
};

/// Write to the terminal once this much is waiting, even mid-batch.
const FLUSH_AT: usize = 8 * 1024;

pub struct TextSink<W: Write + Send> {
    out: W,
    pending: Pending,
}

impl<W: Write + Send> TextSink<W> {
    pub fn new(out: W) -> Self {
        Self { out, pending: Pending::default() }
    }
}

/// `1536` -> `1.5 KiB` (binary units); exact bytes below 1 KiB.
pub fn human(bytes: u64) -> String {
    bytesize::ByteSize::b(bytes).display().iec().to_string()
}

/// [`human`], or `?` for a size that is not known.
pub fn known(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "?".into(), human)
}

fn dev(d: Option<u32>) -> String {
    d.map_or("?".into(), |d| d.to_string())
}

impl<W: Write + Send> Sink for TextSink<W> {
    fn write(&mut self, line: &Line) -> io::Result<()> {
        let text = match line {
            Line::Event(e) => event(e) + &e.holders.as_deref().map(holders).unwrap_or_default(),
            Line::Usage(u) => usage(u),
            Line::Limit(l) => limit(l) + &l.holders.as_deref().map(holders).unwrap_or_default(),
            Line::Dropped(d) => dropped(d),
            Line::Held(h) => {
                let waited = format!("{:.1} ms", h.held_ns as f64 / 1e6);
                let end = if h.resumed { "let go on" } else { "gone while held" };
                caller_line(&h.caller, "held", &format!("{waited} for its pod's rules ({end})"))
            }
            Line::Declared(d) => caller_line(&d.caller, "declared", &declared(d)),
        };
        self.pending.add(&mut self.out, FLUSH_AT, |w| writeln!(w, "{text}"))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.pending.write_to(&mut self.out)
    }

    fn lost(&self) -> u64 {
        self.pending.lost()
    }
}

/// A line of a record the agent writes of a process: when, what, who.
fn caller_line<E>(c: &Caller<E>, what: &str, rest: &str) -> String {
    format!(
        "{:>12}  {:<12} pid {:<7} {:<15} {:<28} {rest}",
        c.ts_ns / 1000,
        what,
        c.pid,
        c.comm,
        c.cgroup.as_deref().unwrap_or("?")
    )
}

/// A `declared` record in words: each limit in force, then each refusal.
pub fn declared(d: &DeclaredLine) -> String {
    let mut parts: Vec<String> = d
        .limits
        .iter()
        .map(|l| {
            let on = match &l.devices {
                None => "all devices".to_string(),
                Some(d) if d.len() == 1 => format!("device {}", d[0]),
                Some(d) => {
                    format!("each of devices {}", d.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
                }
            };
            let clamped = if l.clamped { ", clamped to the cap" } else { "" };
            format!("{} {} on {on}, action {}, view {}{clamped}", l.variable, human(l.hard), l.action, l.view)
        })
        .collect();
    parts.extend(d.refused.iter().map(|r| format!("{} refused: {}", r.variable, r.reason)));
    if parts.is_empty() {
        parts.push("nothing in force".into());
    }
    parts.join("; ")
}

fn event(e: &EventLine) -> String {
    let what = match e.caller.event {
        RecordEvent::Exit | RecordEvent::Exec => format!("released {}", human(e.size)),
        RecordEvent::AllocFailed => {
            format!(
                "{} {} wanted {} -> CUresult {}",
                e.caller.api,
                e.kind,
                human(e.size),
                e.result.unwrap_or(0)
            )
        }
        _ => format!("{} {} dev {} {} at {}", e.caller.api, e.kind, dev(e.device), human(e.size), e.addr),
    };
    format!(
        "{:>12}  {:<12} pid {:<7} {:<15} {:<28} {what}  [proc {} | cgroup {}]",
        e.caller.ts_ns / 1000,
        e.caller.event.name(),
        e.caller.pid,
        e.caller.comm,
        e.caller.cgroup.as_deref().unwrap_or("?"),
        human(e.proc_total),
        human(e.cgroup_total)
    )
}

fn usage(usage: &UsageLine) -> String {
    let u = &usage.entry;
    let who = match u.pid {
        Some(pid) => format!("pid {pid} {}", u.comm.as_deref().unwrap_or("")),
        None => "cgroup".to_string(),
    };
    format!(
        "{:>12}  usage        {who:<23} {:<28} {} (kernel {})",
        usage.ts_ns / 1000,
        u.cgroup.as_deref().unwrap_or("?"),
        human(u.bytes),
        human(u.kernel_bytes)
    )
}

fn limit(l: &LimitLine) -> String {
    format!(
        "{:>12}  {:<12} pid {:<7} {:<15} {:<28} {} {} + {} over {} {} -> {}",
        l.caller.ts_ns / 1000,
        l.caller.event.name(),
        l.caller.pid,
        l.caller.comm,
        l.caller.cgroup.as_deref().unwrap_or("?"),
        l.caller.api,
        human(l.usage),
        human(l.request),
        l.limit,
        human(l.limit_bytes),
        l.action
    )
}

/// The block under an out-of-memory or limit line: who held the memory.
fn holders(h: &Holders) -> String {
    let on = h.device.map_or("every device".into(), |d| format!("device {d}"));
    let nvml = match (h.used, h.capacity) {
        (Some(u), Some(c)) => format!("; the driver: {} used of {}", human(u), human(c)),
        _ => String::new(),
    };
    let mut text = format!("\n{:>14}who held it ({on}: {} seen by gpumem{nvml}):", "", human(h.total));
    let split = |s: &[SplitLine]| -> String {
        s.iter()
            .map(|l| format!("{} {} on {}", l.kind, human(l.bytes), dev(l.device)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let row = |who: String, x: &Holder| {
        format!(
            "\n{:>16}{who:<32} {:<28} {:>10}  {}",
            "",
            x.cgroup.as_deref().unwrap_or("?"),
            human(x.bytes),
            split(&x.split)
        )
    };
    for p in &h.processes {
        let who = format!("pid {} {}", p.pid.unwrap_or(0), p.comm.as_deref().unwrap_or(""));
        text.push_str(&row(who, p));
    }
    for c in &h.cgroups {
        text.push_str(&row("cgroup".into(), c));
    }
    text
}

fn dropped(d: &DroppedLine) -> String {
    format!(
        "{:>12}  DROPPED      {} records lost ({} in total); map_full {} unmatched {} slots_full {} unreadable {} \
         skipped_runs {} malformed {} missed_exits {} missed_thread_exits {} unwritten {}",
        d.ts_ns / 1000,
        d.records,
        d.total,
        d.map_full,
        d.unmatched_returns,
        d.cgroup_slots_full,
        d.out_ptr_unreadable,
        d.skipped_runs,
        d.malformed,
        d.missed_exits,
        d.missed_thread_exits,
        d.unwritten
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_a_block_a_person_reads() {
        let split = vec![SplitLine { kind: "device".into(), device: Some(0), bytes: 5 << 20 }];
        let h = Holders {
            device: Some(0),
            total: 8 << 20,
            processes: vec![Holder {
                pid: Some(42),
                comm: Some("python".into()),
                cgroup: Some("/team-a".into()),
                bytes: 5 << 20,
                split: split.clone(),
            }],
            cgroups: vec![Holder {
                cgroup: Some("/team-a".into()),
                bytes: 5 << 20,
                split,
                ..Holder::default()
            }],
            ..Holders::default()
        };
        let text = holders(&h);
        let lines: Vec<&str> = text.lines().skip(1).map(str::trim).collect();
        assert_eq!(lines[0], "who held it (device 0: 8.0 MiB seen by gpumem):");
        assert!(
            lines[1].starts_with("pid 42 python") && lines[1].ends_with("5.0 MiB  device 5.0 MiB on 0"),
            "{text}"
        );
        assert!(lines[2].starts_with("cgroup") && lines[2].contains("/team-a"), "{text}");
    }

    #[test]
    fn a_held_process_says_how_long_it_waited() {
        let origin = crate::decode::Origin {
            ts_ns: 5_000_000,
            pid: 4242,
            tid: 4242,
            cgroup_id: 7,
            comm: "python".into(),
            api: 0,
        };
        let at = (Some("/kubepods/pod1/c".into()), None);
        let h = crate::output::held::HeldLine::new(&origin, at, (6, None), (12_500_000, true));
        let mut sink = TextSink::new(Vec::new());
        sink.write(&Line::Held(h)).unwrap();
        sink.flush().unwrap();
        let text = String::from_utf8(sink.out).unwrap();
        assert!(text.contains("held         pid 4242    python"), "{text}");
        assert!(
            text.trim_end().ends_with("/kubepods/pod1/c             12.5 ms for its pod's rules (let go on)"),
            "{text}"
        );
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
