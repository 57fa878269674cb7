//! The soak's reading of the agent's output: per process, how many
//! `alloc`, `free` and `alloc_failed` records were written, counted as the
//! file grows and then forgotten (an hour of records does not fit in the
//! test's memory), and the file emptied at the end of each round with the
//! agent stopped (SIGSTOP), so that no line is half read or lost there.
use std::{
    collections::HashMap,
    io::{Read, Seek, SeekFrom},
    path::PathBuf,
};

use gpumem::output::{Line, RecordEvent};

/// What one process's records say: allocations, frees, refused
/// allocations.
pub type Calls = [u64; 3];

pub struct Tally {
    path: PathBuf,
    offset: u64,
    /// The last line's bytes while its newline has not been written yet.
    partial: Vec<u8>,
    calls: HashMap<u32, Calls>,
    /// Lines read over the whole soak.
    pub lines: u64,
    /// What the last `dropped` line said the agent could not write.
    pub unwritten: u64,
}

impl Tally {
    pub fn new(path: PathBuf) -> Self {
        Self { path, offset: 0, partial: Vec::new(), calls: HashMap::new(), lines: 0, unwritten: 0 }
    }

    /// Reads what the agent wrote since the last read.
    pub fn read(&mut self) {
        let mut new = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&self.path) {
            if f.seek(SeekFrom::Start(self.offset)).is_ok() {
                let _ = f.read_to_end(&mut new);
            }
        }
        self.offset += new.len() as u64;
        self.partial.extend_from_slice(&new);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else { return };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        for l in complete.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            self.lines += 1;
            let line: Line = serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!("the agent wrote a line that is not a record ({e}): {}", String::from_utf8_lossy(l))
            });
            if let Line::Dropped(d) = &line {
                self.unwritten = d.unwritten;
            }
            if let Line::Event(e) = line {
                let i = match e.caller.event {
                    RecordEvent::Alloc => 0,
                    RecordEvent::Free => 1,
                    RecordEvent::AllocFailed => 2,
                    _ => continue,
                };
                self.calls.entry(e.caller.pid).or_default()[i] += 1;
            }
        }
    }

    /// The calls of process `pid` written so far.
    pub fn calls(&mut self, pid: u32) -> Calls {
        self.read();
        self.calls.get(&pid).copied().unwrap_or_default()
    }

    /// Forgets the processes of a round that ended.
    pub fn forget(&mut self, pids: &[u32]) {
        for pid in pids {
            self.calls.remove(pid);
        }
    }

    /// Empties the file while the agent (`agent`) is stopped: what it
    /// wrote is read first; a line it had half written stays in
    /// `partial`, and its rest lands at the start of the emptied file (the
    /// agent appends).
    pub fn empty(&mut self, agent: u32) {
        let truncated = gpumem_tests::harness::stopped_while(agent, || {
            self.read();
            std::fs::File::options().write(true).open(&self.path).and_then(|f| f.set_len(0))
        });
        truncated.unwrap_or_else(|e| panic!("emptying {}: {e}", self.path.display()));
        self.offset = 0;
    }
}
