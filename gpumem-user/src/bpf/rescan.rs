//! What the rescan reads every `--rescan` period: the driver's library
//! files that processes have mapped since the last look (a container's
//! own copy, a driver upgrade's new file, a `dlopen` after start).
//!
//! Reading every process's memory map every second cost an idle agent
//! 11% of a core beside 300 small Python processes (162 lines of maps
//! each), and each read takes that process's mmap lock. So a process's
//! map is read only when it is new or its virtual size changed since the
//! last look (`/proc/PID/stat`, read without that lock): mapping a library
//! grows it. A map that changed at an unchanged size (a library mapped
//! while as much was unmapped between two looks) is seen at the next
//! change of size. The map's lines are matched as text: only those naming
//! a driver library are parsed, the same way procfs parses them.
use std::{
    collections::HashMap,
    io::Read,
    path::{Path, PathBuf},
};

use super::discover::kind_of;
use gpumem_common::api::Library as Kind;

/// The rescan's memory of what it looked at.
#[derive(Debug, Default)]
pub struct Rescan {
    /// Per process: its start time and virtual size when its map was
    /// last read, and the look that last saw it.
    seen: HashMap<u32, Seen>,
    looks: u64,
    /// Library files that could not be attached (said once), by (device,
    /// inode).
    pub rejected: std::collections::HashSet<(u64, u64)>,
    buf: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    start: u64,
    vsize: u64,
    look: u64,
}

impl Rescan {
    /// The driver's library files mapped by processes that are new or
    /// whose size changed since the last call (every process the first
    /// time), each reached through its process's root, so that a
    /// container's copy resolves.
    pub fn mapped_since(&mut self) -> Vec<PathBuf> {
        self.looks += 1;
        let look = self.looks;
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else { return out };
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            // A process gone or not ours to read is skipped.
            let Some((start, vsize)) = start_and_vsize(self.read(&format!("/proc/{pid}/stat"))) else {
                continue;
            };
            let before = self.seen.insert(pid, Seen { start, vsize, look });
            if before.is_some_and(|b| b.start == start && b.vsize == vsize) {
                continue;
            }
            for path in library_paths(self.read(&format!("/proc/{pid}/maps"))) {
                out.push(PathBuf::from(format!("/proc/{pid}/root{path}")));
            }
        }
        self.seen.retain(|_, s| s.look == look);
        out
    }

    /// The file at `path` in the reused buffer; empty if it cannot be read.
    fn read(&mut self, path: &str) -> &[u8] {
        self.buf.clear();
        if let Ok(mut f) = std::fs::File::open(path) {
            if f.read_to_end(&mut self.buf).is_err() {
                self.buf.clear();
            }
        }
        &self.buf
    }
}

/// A process's start time and virtual size from its `/proc/PID/stat`
/// (fields 22 and 23; the command name before them may hold spaces and
/// parentheses, so fields count from its last ')').
pub fn start_and_vsize(stat: &[u8]) -> Option<(u64, u64)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace().skip(19);
    let start = fields.next()?.parse().ok()?;
    let vsize = fields.next()?.parse().ok()?;
    Some((start, vsize))
}

/// The distinct driver library paths in a `/proc/PID/maps` text. A line's
/// path is what follows its fifth space, trimmed, as procfs takes it.
pub fn library_paths(maps: &[u8]) -> Vec<String> {
    let prefixes = [Kind::Cuda.file_prefix().as_bytes(), Kind::Nvml.file_prefix().as_bytes()];
    let mut out: Vec<String> = Vec::new();
    for line in maps.split(|&b| b == b'\n') {
        if !prefixes.iter().any(|p| line.windows(p.len()).any(|w| w == *p)) {
            continue;
        }
        let line = String::from_utf8_lossy(line);
        let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim) else { continue };
        if path.starts_with('/') && kind_of(Path::new(path)).is_some() && !out.iter().any(|p| p == path) {
            out.push(path.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests;
