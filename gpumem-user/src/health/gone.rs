//! Whether a process or a thread is gone, from /proc: what the agent asks
//! before it finishes, in the kernel, an exit whose program run the kernel
//! skipped. A zombie counts as gone: its driver state (memory, calls in
//! flight) went at its exit; only its parent's `wait` is left.
use std::{collections::BTreeSet, io::ErrorKind, path::Path};

/// A process's threads as /proc shows them.
#[derive(Debug, PartialEq, Eq)]
pub enum Tasks {
    /// Every thread has exited (no entry, or only a zombie leader).
    Gone,
    /// /proc could not be read (not "no such process"): asked again at the
    /// next health step, nothing is taken for gone meanwhile.
    Unknown,
    /// The threads that have not exited.
    Running(BTreeSet<u32>),
}

impl Tasks {
    /// Whether thread `tid` of this process has exited.
    pub fn thread_gone(&self, tid: u32) -> bool {
        match self {
            Tasks::Gone => true,
            Tasks::Unknown => false,
            Tasks::Running(tids) => !tids.contains(&tid),
        }
    }
}

/// Process `tgid`'s threads: those listed under /proc/<tgid>/task, less a
/// zombie leader (one that left with `pthread_exit` while others run on,
/// or a process its parent has not waited for). Other threads leave the
/// list as they exit. Only "no such file" counts as gone.
pub fn tasks(proc_root: &Path, tgid: u32) -> Tasks {
    let dir = match std::fs::read_dir(proc_root.join(format!("{tgid}/task"))) {
        Ok(dir) => dir,
        Err(e) if e.kind() == ErrorKind::NotFound => return Tasks::Gone,
        Err(_) => return Tasks::Unknown,
    };
    let mut tids = BTreeSet::new();
    for entry in dir {
        let Ok(entry) = entry else { return Tasks::Unknown };
        if let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) {
            tids.insert(tid);
        }
    }
    if tids.contains(&tgid) {
        match std::fs::read_to_string(proc_root.join(format!("{tgid}/task/{tgid}/stat"))) {
            Ok(text) if state(&text).is_some_and(exited) => {
                tids.remove(&tgid);
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                tids.remove(&tgid);
            }
            Err(_) => return Tasks::Unknown,
        }
    }
    if tids.is_empty() {
        Tasks::Gone
    } else {
        Tasks::Running(tids)
    }
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
        let mine = tasks(root, me);
        assert!(matches!(&mine, Tasks::Running(t) if t.contains(&me)), "{mine:?}");
        assert!(!mine.thread_gone(me));
        assert!(mine.thread_gone(u32::MAX));
        assert_eq!(tasks(root, u32::MAX), Tasks::Gone);
    }

    #[test]
    fn an_unreadable_proc_takes_nobody_for_gone() {
        // A file where a directory should be: not "no such file".
        let root = std::env::temp_dir().join(format!("gpumem-gone-{}", std::process::id()));
        std::fs::create_dir_all(root.join("7")).unwrap();
        std::fs::write(root.join("7/task"), "").unwrap();
        let t = tasks(&root, 7);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(t, Tasks::Unknown);
        assert!(!t.thread_gone(7));
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
