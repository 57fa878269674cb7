//! JSON Lines: one object per line, flushed in batches.
use std::io::{self, Write};

use super::{pending::Pending, Sink};
use crate::output::{
    lines::event_json::{self, Placed},
    Line,
};

/// Flush to the writer once this much is buffered, even mid-batch.
const FLUSH_AT: usize = 64 * 1024;

pub struct JsonSink<W: Write + Send> {
    out: W,
    pending: Pending,
    /// The last event line's cgroup and container, as written.
    placed: Placed,
}

impl<W: Write + Send> JsonSink<W> {
    pub fn new(out: W) -> Self {
        Self { out, pending: Pending::default(), placed: Placed::default() }
    }
}

impl<W: Write + Send> Sink for JsonSink<W> {
    fn write(&mut self, line: &Line) -> io::Result<()> {
        let placed = &mut self.placed;
        self.pending.add(&mut self.out, FLUSH_AT, |w| {
            match line {
                Line::Event(event) => event_json::write(w.get_mut(), event, placed)?,
                _ => serde_json::to_writer(&mut *w, line)?,
            }
            w.write_all(b"\n")
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.pending.write_to(&mut self.out)
    }

    fn lost(&self) -> u64 {
        self.pending.lost()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::DroppedLine;

    #[test]
    fn one_object_per_line() {
        let mut out = Vec::new();
        {
            let mut s = JsonSink::new(&mut out);
            let d = DroppedLine { ts_ns: 1, records: 2, total: 3, ..DroppedLine::default() };
            s.write(&Line::Dropped(d.clone())).unwrap();
            s.write(&Line::Dropped(d)).unwrap();
            s.flush().unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["event"], "dropped");
        assert_eq!(v["records"], 2);
    }
}
