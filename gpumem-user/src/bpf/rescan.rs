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
//! change of size. The map itself is read as start-up's discovery reads it
//! (`discover::mapped_paths`).
use std::{collections::HashMap, path::PathBuf};

use super::discover::mapped_paths;

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
        let seen = &mut self.seen;
        let mut buf = [0u8; STAT_BYTES];
        let out = mapped_paths(|pid| {
            // A process gone or not ours to read is skipped.
            let Ok(stat) = read_stat(pid, &mut buf) else { return false };
            let Some((start, vsize)) = start_and_vsize(stat) else { return false };
            let before = seen.insert(pid, Seen { start, vsize, look });
            !before.is_some_and(|b| b.start == start && b.vsize == vsize)
        });
        self.seen.retain(|_, s| s.look == look);
        out
    }
}

/// More than a `/proc/PID/stat` line holds (52 numbers and a command name
/// of at most 64 bytes).
const STAT_BYTES: usize = 2048;

/// Process `pid`'s `/proc/PID/stat` line, in `buf`: an open, one read and
/// a close, as the kernel writes the line whole at the first read (a read
/// to the end took three system calls more: a size probe, a seek, and the
/// read that finds the end, for every process every second).
fn read_stat(pid: u32, buf: &mut [u8; STAT_BYTES]) -> std::io::Result<&[u8]> {
    use std::io::Read;
    let n = std::fs::File::open(format!("/proc/{pid}/stat"))?.read(buf)?;
    Ok(&buf[..n])
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

#[cfg(test)]
mod tests;
