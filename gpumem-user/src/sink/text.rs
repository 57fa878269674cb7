//! A line per record for people watching a terminal.
use std::io::{self, Write};

use super::Sink;
use crate::output::Line;

pub struct TextSink<W: Write + Send> {
    out: io::BufWriter<W>,
}

impl<W: Write + Send> TextSink<W> {
    pub fn new(out: W) -> Self {
        Self { out: io::BufWriter::new(out) }
    }
}

/// `1536` -> `1.5 KiB`; exact bytes below 1 KiB.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn dev(d: Option<u32>) -> String {
    d.map_or("?".into(), |d| d.to_string())
}

impl<W: Write + Send> Sink for TextSink<W> {
    fn write(&mut self, line: &Line) -> io::Result<()> {
        match line {
            Line::Event(e) => {
                let cg = e.caller.cgroup.as_deref().unwrap_or("?");
                let what = match e.caller.event {
                    "exit" | "exec" => format!("released {}", human(e.size)),
                    "alloc_failed" => format!("{} {} wanted {} -> CUresult {}", e.caller.api, e.kind, human(e.size), e.result),
                    _ => format!("{} {} dev {} {} at {}", e.caller.api, e.kind, dev(e.device), human(e.size), e.addr),
                };
                writeln!(
                    self.out,
                    "{:>12}  {:<12} pid {:<7} {:<15} {:<28} {}  [proc {} | cgroup {}]",
                    e.caller.ts_ns / 1000,
                    e.caller.event,
                    e.caller.pid,
                    e.caller.comm,
                    cg,
                    what,
                    human(e.proc_total),
                    human(e.cgroup_total)
                )
            }
            Line::Usage(usage) => {
                let u = &usage.entry;
                let who = match u.pid {
                    Some(pid) => format!("pid {pid} {}", u.comm.as_deref().unwrap_or("")),
                    None => "cgroup".to_string(),
                };
                writeln!(
                    self.out,
                    "{:>12}  usage        {:<23} {:<28} {} (kernel {})",
                    usage.ts_ns / 1000,
                    who,
                    u.cgroup.as_deref().unwrap_or("?"),
                    human(u.bytes),
                    human(u.kernel_bytes)
                )
            }
            Line::Limit(l) => writeln!(
                self.out,
                "{:>12}  {:<12} pid {:<7} {:<15} {:<28} {} {} + {} over {} {} -> {}",
                l.caller.ts_ns / 1000,
                l.caller.event,
                l.caller.pid,
                l.caller.comm,
                l.caller.cgroup.as_deref().unwrap_or("?"),
                l.caller.api,
                human(l.usage),
                human(l.request),
                l.limit,
                human(l.limit_bytes),
                l.action
            ),
            Line::Dropped(d) => writeln!(
                self.out,
                "{:>12}  DROPPED      {} records lost ({} in total); map_full {} unmatched {} slots_full {} unreadable {} skipped_runs {} malformed {} missed_exits {}",
                d.ts_ns / 1000,
                d.records,
                d.total,
                d.map_full,
                d.unmatched_returns,
                d.cgroup_slots_full,
                d.out_ptr_unreadable,
                d.skipped_runs,
                d.malformed,
                d.missed_exits
            ),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
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
