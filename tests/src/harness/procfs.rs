//! What the tests read of a process in `/proc/PID/stat`.

/// The fields of `/proc/PID/stat` after the command name (which may hold
/// spaces and parentheses: they follow the last ')'), from the state on;
/// none once the process is gone.
pub fn stat_fields(pid: u32) -> Vec<String> {
    after_comm(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

fn after_comm(stat: &str) -> Vec<String> {
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after.split_whitespace().map(str::to_string).collect()
}

/// Whether the process is stopped (state `T`: a signal, SIGSTOP).
pub fn stopped(pid: u32) -> bool {
    stat_fields(pid).first().map(String::as_str) == Some("T")
}

/// Whether every thread of the process is stopped (a SIGSTOP stops them
/// one by one: the main thread's state alone says too early).
pub fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        after_comm(&stat).first().map(String::as_str) == Some("T")
    })
}

/// Runs `f` while process `pid` is stopped (SIGSTOP, every thread of it
/// stopped; SIGCONT after), and returns what `f` did.
pub fn stopped_while<R>(pid: u32, f: impl FnOnce() -> R) -> R {
    use nix::sys::signal::{kill, Signal};
    let p = nix::unistd::Pid::from_raw(pid as i32);
    kill(p, Signal::SIGSTOP).expect("stopping the process");
    super::poll::wait_until("the process stopped", || all_stopped(pid));
    let r = f();
    kill(p, Signal::SIGCONT).expect("continuing the process");
    r
}

/// The process's anonymous and whole resident memory (`RssAnon`, `VmRSS`
/// of `/proc/PID/status`), KiB; 0 where unread.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("VmRSS:"))
}

/// The process's user and system time so far, in clock ticks (utime and
/// stime, the 12th and 13th fields after the command name).
pub fn cpu_ticks(pid: u32) -> u64 {
    stat_fields(pid).iter().skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_the_last_parenthesis_of_the_command_name() {
        let stat = "42 (a) T (b)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0";
        let f = after_comm(stat);
        assert_eq!(f[0], "S");
        assert_eq!(f[11..13], ["7", "3"]);
        assert!(after_comm("").is_empty());
        assert!(!stopped(std::process::id()));
    }
}
