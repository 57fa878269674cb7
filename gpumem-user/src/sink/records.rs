//! The sink as the agent drives it. A writer that fails (a full disk)
//! stops neither tracing nor limits: its lines wait or are counted as lost
//! (`unwritten` in `dropped` records and in `gpumem status`), and the
//! operator is told on stderr once when writing stops and once when it
//! resumes. Only a reader gone for good (a closed pipe) ends the agent, as
//! it would end any filter in a pipeline.
use std::io;

use super::{pending::KEEP, Sink};
use crate::output::Line;

pub struct Records {
    sink: Box<dyn Sink>,
    /// Where the lines go, for messages.
    name: String,
    /// Writing fails, and had lost this many lines when it began to.
    failing_since: Option<u64>,
}

impl Records {
    pub fn new(sink: Box<dyn Sink>, name: String) -> Self {
        Self { sink, name, failing_since: None }
    }

    pub fn write(&mut self, line: &Line) -> io::Result<()> {
        let r = self.sink.write(line);
        self.check(r, false)
    }

    /// Makes everything written so far visible to readers, if the writer
    /// takes it.
    pub fn flush(&mut self) -> io::Result<()> {
        let r = self.sink.flush();
        self.check(r, true)
    }

    /// Whether the last write failed.
    pub fn failing(&self) -> bool {
        self.failing_since.is_some()
    }

    /// Lines dropped so far because writing failed.
    pub fn lost(&self) -> u64 {
        self.sink.lost()
    }

    fn check(&mut self, r: io::Result<()>, flushed: bool) -> io::Result<()> {
        match r {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(e),
            Err(e) => {
                if self.failing_since.is_none() {
                    self.failing_since = Some(self.lost());
                    tracing::warn!(
                        "cannot write records to {}: {e}; tracing and limits go on, up to {} KiB of records wait \
                         for the next try and the rest are counted as lost (`unwritten` in `dropped` records and \
                         in `gpumem status`): free space or fix the output",
                        self.name,
                        KEEP >> 10
                    );
                }
                Ok(())
            }
            Ok(()) => {
                if let Some(before) = self.failing_since.filter(|_| flushed) {
                    self.failing_since = None;
                    tracing::info!(
                        "writing records to {} again; {} lost meanwhile",
                        self.name,
                        self.lost() - before
                    );
                }
                Ok(())
            }
        }
    }
}
