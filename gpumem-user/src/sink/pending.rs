//! The bytes a sink has formatted and not yet written. A write that fails
//! (a full disk) or stops short leaves the rest here for the next try, from
//! the first byte not written, so no line is ever torn in the output. While
//! writing fails, lines are kept up to [`KEEP`] bytes; the ones that do not
//! fit are dropped and counted.
use std::io::{self, Write};

use bytes::{Buf, BufMut, BytesMut};

/// Bytes kept for a writer that fails: about 3,000 JSON records.
pub const KEEP: usize = 1 << 20;

/// A buffer grown past this (by an outage: a batch is at most 64 KiB) is
/// given back once written out, so that the agent's memory returns to
/// what it was before the disk filled.
const SHRINK_ABOVE: usize = KEEP / 4;

#[derive(Debug, Default)]
pub struct Pending {
    buf: BytesMut,
    /// The last write failed: wait for the next flush to try again.
    failing: bool,
    /// Lines dropped because the writer failed and [`KEEP`] bytes waited.
    lost: u64,
}

impl Pending {
    /// Appends one line, which `put` writes (newline included), unless
    /// [`KEEP`] bytes already wait for a failing writer: then the line is
    /// dropped and counted.
    pub fn push(
        &mut self,
        put: impl FnOnce(&mut bytes::buf::Writer<&mut BytesMut>) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.failing && self.buf.len() >= KEEP {
            self.lost += 1;
            return Ok(());
        }
        put(&mut (&mut self.buf).writer())
    }

    /// Appends one line as [`Pending::push`] does, then writes everything
    /// out once `flush_at` bytes wait, unless the last write failed: a
    /// failing writer is tried again at the batch's flush only.
    pub fn add(
        &mut self,
        out: &mut impl Write,
        flush_at: usize,
        put: impl FnOnce(&mut bytes::buf::Writer<&mut BytesMut>) -> io::Result<()>,
    ) -> io::Result<()> {
        self.push(put)?;
        if !self.failing && self.buf.len() >= flush_at {
            self.write_to(out)?;
        }
        Ok(())
    }

    /// Lines dropped so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Writes everything waiting to `out`, keeping what `out` refuses.
    pub fn write_to(&mut self, out: &mut impl Write) -> io::Result<()> {
        while !self.buf.is_empty() {
            match out.write(&self.buf) {
                Ok(0) => return self.failed(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.buf.advance(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.failed(e),
            }
        }
        match out.flush() {
            Ok(()) => {
                self.failing = false;
                if self.buf.capacity() > SHRINK_ABOVE {
                    self.buf = BytesMut::new();
                }
                Ok(())
            }
            Err(e) => self.failed(e),
        }
    }

    fn failed(&mut self, e: io::Error) -> io::Result<()> {
        self.failing = true;
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes `room` bytes, then fails like a full disk.
    struct Disk {
        data: Vec<u8>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let n = b.len().min(self.room - self.data.len());
            if n == 0 {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            self.data.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(p: &mut Pending, i: usize) {
        p.push(|w| writeln!(w, "line {i:06}")).unwrap(); // 12 bytes
    }

    #[test]
    fn a_full_disk_tears_no_line_and_loses_only_what_does_not_fit() {
        let mut disk = Disk { data: Vec::new(), room: 30 };
        let mut p = Pending::default();
        for i in 0..3 {
            line(&mut p, i);
        }
        assert!(p.write_to(&mut disk).is_err(), "36 bytes into 30");
        assert!(p.failing);
        // Kept until KEEP bytes wait, then dropped and counted.
        let kept = (KEEP - p.buf.len()).div_ceil(12);
        for i in 3..3 + kept + 5 {
            line(&mut p, i);
        }
        assert_eq!(p.lost(), 5);
        // Room again: the torn line is finished first, then the rest.
        disk.room = usize::MAX;
        p.write_to(&mut disk).unwrap();
        assert!(!p.failing);
        let text = String::from_utf8(disk.data).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3 + kept);
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(*l, format!("line {i:06}"));
        }
        // What the outage grew is given back once written.
        assert!(p.buf.capacity() <= SHRINK_ABOVE, "{} bytes kept", p.buf.capacity());
    }
}
