//! The agent's JSON Lines output, read as it grows: each read parses only
//! the complete lines written since the last one, so a test that waits on
//! a stream of hundreds of thousands of records costs the host (or the
//! emulated guest, where the agent shares two slow vCPUs with the test)
//! what the new records cost, not the whole file again every poll.
use std::{
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    sync::Mutex,
};

use gpumem::output::Line;

pub struct Output {
    path: PathBuf,
    read: Mutex<Seen>,
}

/// What has been read: the records of the complete lines, and where the
/// next read starts (after the last newline seen).
#[derive(Default)]
struct Seen {
    lines: Vec<Line>,
    offset: u64,
}

impl Output {
    pub fn new(path: PathBuf) -> Self {
        Self { path, read: Mutex::default() }
    }

    /// `f` over every complete line written so far, read as records (a
    /// read can land in the middle of a write: a last line without its
    /// newline is not complete yet and is read next time).
    pub fn with<R>(&self, f: impl FnOnce(&[Line]) -> R) -> R {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let new = tail(&self.path, read.offset);
        let complete = new.iter().rposition(|&b| b == b'\n').map_or(0, |end| end + 1);
        for l in new[..complete].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            read.lines.push(serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!("agent wrote a line that is not a record ({e}): {}", String::from_utf8_lossy(l))
            }));
        }
        read.offset += complete as u64;
        f(&read.lines)
    }
}

/// The bytes of `path` from `offset` on (none if it does not exist yet).
fn tail(path: &Path, offset: u64) -> Vec<u8> {
    let mut new = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        if f.seek(SeekFrom::Start(offset)).is_ok() {
            let _ = f.read_to_end(&mut new);
        }
    }
    new
}
