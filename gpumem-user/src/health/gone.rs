//! Whether a process or a thread is gone, from /proc: what the agent asks
//! before it finishes, in the kernel, an exit whose program run the kernel
//! skipped. A zombie counts as gone: its driver state (memory, calls in
//! flight) went at its exit; only its parent's `wait` is left.
use std::path::Path;

/// Whether thread `tid` of process `tgid` has exited.
pub fn thread_gone(proc_root: &Path, tgid: u32, tid: u32) -> bool {
    let stat = proc_root.join(format!("{tgid}/task/{tid}/stat"));
    std::fs::read_to_string(stat).map_or(true, |text| state(&text).is_none_or(exited))
}

/// Whether every thread of process `tgid` has exited (a leader that left
/// with `pthread_exit` is a zombie while its other threads run on).
pub fn process_gone(proc_root: &Path, tgid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(proc_root.join(format!("{tgid}/task"))) else {
        return true;
    };
    tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .all(|tid| thread_gone(proc_root, tgid, tid))
}

/// The state letter of a `/proc/<pid>/stat` line: the field after the
/// command, which is in parentheses and may hold anything but a newline
/// (parentheses and spaces too), so it is found from the last `)`.
pub fn state(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace();
    fields.next().and_then(|f| f.chars().next())
}

/// Zombie (Z) or dead (X, x): the task's exit has run.
fn exited(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn state_is_read_after_the_last_parenthesis() {
        assert_eq!(state("42 (bash) S 1 42 42 0 -1"), Some('S'));
        assert_eq!(state("7 (a) Z (b)) R 1 2"), Some('R'));
        assert_eq!(state("7 (x) "), None);
        assert_eq!(state("garbage"), None);
        assert_eq!(state(""), None);
    }

    #[test]
    fn this_thread_is_not_gone_and_a_missing_one_is() {
        let root = Path::new("/proc");
        let me = std::process::id();
        assert!(!thread_gone(root, me, me));
        assert!(!process_gone(root, me));
        assert!(thread_gone(root, me, u32::MAX));
        assert!(process_gone(root, u32::MAX));
    }

    proptest! {
        #[test]
        fn any_command_name_gives_the_state_back(comm in "[^\n]{0,32}", st in "[RSDZTtXxIWP]") {
            let line = format!("123 ({comm}) {st} 1 123 123 0 -1 4194560");
            prop_assert_eq!(state(&line), st.chars().next());
        }

        #[test]
        fn any_text_is_read_without_panicking(text in "\\PC{0,80}") {
            let _ = state(&text);
        }
    }
}
