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

impl ProcessInfo {
    /// What `/proc` says of `pid` now; a field it cannot give is None.
    pub fn read(pid: u32) -> Self {
        let Ok(p) = procfs::process::Process::new(pid as i32) else { return Self::default() };
        Self {
            exe: p.exe().ok().map(|e| e.display().to_string()),
            cmdline: p.cmdline().ok().map(|args| args.join(" ")),
        }
    }
}

#[derive(Debug, Default)]
pub struct Processes {
    known: HashMap<u32, ProcessInfo>,
}

impl Processes {
    /// The process's info, read once.
    pub fn get(&mut self, pid: u32) -> ProcessInfo {
        self.known.entry(pid).or_insert_with(|| ProcessInfo::read(pid)).clone()
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
    fn reads_this_process() {
        let mut p = Processes::default();
        let me = p.get(std::process::id());
        assert_eq!(me.exe, std::env::current_exe().ok().map(|p| p.display().to_string()));
        let args: Vec<String> = std::env::args().collect();
        assert_eq!(me.cmdline, Some(args.join(" ")));
        assert_eq!(ProcessInfo::read(u32::MAX), ProcessInfo::default(), "no such process: nothing guessed");
    }
}
