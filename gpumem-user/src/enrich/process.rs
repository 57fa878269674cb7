//! A process's executable and command line, read from `/proc` when gpumem
//! first reports it and forgotten when it exits or execs.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// `/proc/PID/exe` (as the process's mount namespace names it).
    pub exe: Option<String>,
    /// `/proc/PID/cmdline`, arguments joined by spaces.
    pub cmdline: Option<String>,
}

/// Turns a NUL-separated `/proc/PID/cmdline` into one line.
pub fn cmdline(raw: &[u8]) -> String {
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Default)]
pub struct Processes {
    known: HashMap<u32, ProcessInfo>,
}

impl Processes {
    /// The process's info, read once.
    pub fn get(&mut self, pid: u32) -> ProcessInfo {
        self.known
            .entry(pid)
            .or_insert_with(|| ProcessInfo {
                exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(|p| p.display().to_string()),
                cmdline: std::fs::read(format!("/proc/{pid}/cmdline")).ok().map(|raw| cmdline(&raw)),
            })
            .clone()
    }

    /// Forgets `pid` (exit or exec: the next read sees the new image).
    pub fn forget(&mut self, pid: u32) {
        self.known.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_joins_arguments() {
        assert_eq!(cmdline(b"python3\0train.py\0--epochs\x0010\0"), "python3 train.py --epochs 10");
        assert_eq!(cmdline(b""), "");
    }

    #[test]
    fn reads_this_process() {
        let mut p = Processes::default();
        let me = p.get(std::process::id());
        assert_eq!(me.exe, std::env::current_exe().ok().map(|p| p.display().to_string()));
        assert!(me.cmdline.is_some_and(|c| !c.is_empty()));
    }
}
