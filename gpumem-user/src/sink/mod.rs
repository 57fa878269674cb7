//! Where records go. The event loop hands every [`Line`] to one sink; the
//! sink decides the format. Tests use [`MemorySink`].
pub mod json;
pub mod text;

use std::io;

use crate::output::Line;

pub trait Sink: Send {
    fn write(&mut self, line: &Line) -> io::Result<()>;
    /// Makes everything written so far visible to readers.
    fn flush(&mut self) -> io::Result<()>;
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
