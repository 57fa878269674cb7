//! A line per record for people watching a terminal.
use std::io::{self, Write};

use super::{pending::Pending, Sink};
use crate::output::{DroppedLine, EventLine, LimitLine, Line, RecordEvent, UsageLine};

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

fn dev(d: Option<u32>) -> String {
    d.map_or("?".into(), |d| d.to_string())
}

impl<W: Write + Send> Sink for TextSink<W> {
    fn write(&mut self, line: &Line) -> io::Result<()> {
        let text = match line {
            Line::Event(e) => event(e),
            Line::Usage(u) => usage(u),
            Line::Limit(l) => limit(l),
            Line::Dropped(d) => dropped(d),
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

fn event(e: &EventLine) -> String {
    let what = match e.caller.event {
        RecordEvent::Exit | RecordEvent::Exec => format!("released {}", human(e.size)),
        RecordEvent::AllocFailed => {
            format!("{} {} wanted {} -> CUresult {}", e.caller.api, e.kind, human(e.size), e.result)
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

fn dropped(d: &DroppedLine) -> String {
    format!(
        "{:>12}  DROPPED      {} records lost ({} in total); map_full {} unmatched {} slots_full {} unreadable {} \
         skipped_runs {} malformed {} missed_exits {} unwritten {}",
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
        d.unwritten
    )
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
