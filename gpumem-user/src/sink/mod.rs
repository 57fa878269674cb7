//! Where records go. The event loop hands every [`Line`] to one sink
//! through `records::Records`, which keeps a writer's failure from stopping
//! anything else; the sink decides the format. Tests use [`MemorySink`].
pub mod json;
mod pending;
pub mod records;
pub mod text;

use std::io;

use crate::output::Line;

pub trait Sink: Send {
    fn write(&mut self, line: &Line) -> io::Result<()>;
    /// Makes everything written so far visible to readers.
    fn flush(&mut self) -> io::Result<()>;
    /// Lines dropped because the writer failed (see `pending.rs`).
    fn lost(&self) -> u64 {
        0
    }
}

/// Keeps lines in memory.
#[derive(Debug, Default)]
pub struct MemorySink {
    pub lines: Vec<Line>,
}

impl Sink for MemorySink {
    fn write(&mut self, line: &Line) -> io::Result<()> {
        self.lines.push(line.clone());
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
