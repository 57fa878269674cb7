//! Which process a slot belongs to, and whether it still runs: a pid and
//! its start time, as the kernel tells them in /proc.

/// A process: its pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub start: u64,
}

impl Process {
    /// The calling process (asked each time: a forked child is another).
    pub fn current() -> Self {
        let pid = std::process::id();
        Self { pid, start: start_time(pid).unwrap_or(0) }
    }

    /// Whether this process still runs (a pid reused since is another
    /// process, so not this one).
    pub fn alive(&self) -> bool {
        match start_time(self.pid) {
            Some(start) => start == self.start || self.start == 0,
            // No /proc entry: gone, unless /proc is not there to ask.
            None => !std::path::Path::new("/proc/self/stat").exists() && signal_zero(self.pid),
        }
    }
}

/// Field 22 of /proc/PID/stat (after the command name, which may hold
/// spaces and parentheses: read from its last ')').
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start(&stat)
}

fn parse_start(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from the 3rd (state) on: the start time is the 22nd field.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn signal_zero(pid: u32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_read_past_a_command_with_spaces_and_parentheses() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start(stat), Some(987654));
        assert_eq!(parse_start("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_is_not() {
        let me = Process::current();
        assert!(me.start > 0 && me.alive());
        assert!(!Process { start: me.start + 1, ..me }.alive(), "a reused pid is another process");
    }
}
