//! A program's runs the kernel skipped (`recursion_misses`), from its
//! fd's `/proc/self/fdinfo` (aya's program info does not carry it; the
//! line is there from 5.12).
//!
//! The health step looks every second. The fdinfo file is opened once
//! and read from its start at each look (a `pread` at 0 regenerates a
//! seq_file's text): one system call, where opening and reading it anew
//! took eight (open, statx, five reads of a growing buffer, close) for
//! each program, three quarters of an idle agent's system calls.
use std::{
    fs::File,
    os::{
        fd::{AsFd, AsRawFd},
        unix::fs::FileExt,
    },
};

use aya::programs::ProgramFd;

/// One program's skipped runs, read through its kept fdinfo file.
pub struct SkippedRuns {
    /// The program's fd, which the fdinfo file describes: kept open with it.
    _program: ProgramFd,
    info: Option<File>,
}

impl SkippedRuns {
    pub fn of(program: ProgramFd) -> Self {
        let info = File::open(format!("/proc/self/fdinfo/{}", program.as_fd().as_raw_fd())).ok();
        Self { _program: program, info }
    }

    /// The count now; None where the kernel does not say (before 5.12) or
    /// the file cannot be read.
    pub fn now(&self) -> Option<u64> {
        let info = self.info.as_ref()?;
        let mut buf = [0u8; 1024];
        let mut text = Vec::new();
        loop {
            // A read shorter than the buffer is the rest of the text.
            let n = info.read_at(&mut buf, text.len() as u64).ok()?;
            text.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                break;
            }
        }
        fdinfo_field(std::str::from_utf8(&text).ok()?, "recursion_misses")
    }
}

/// A numeric `name:` line of an fdinfo text.
fn fdinfo_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_program_fdinfo_field() {
        let text =
            "pos:\t0\nflags:\t02000002\nprog_type:\t2\nrun_time_ns:\t10\nrun_cnt:\t3\nrecursion_misses:\t7\n";
        assert_eq!(super::fdinfo_field(text, "recursion_misses"), Some(7));
        assert_eq!(super::fdinfo_field(text, "run_cnt"), Some(3));
        assert_eq!(super::fdinfo_field("run_cnt:\tx\n", "run_cnt"), None);
        assert_eq!(super::fdinfo_field(text, "verified_insns"), None);
    }

    /// A kept fdinfo file read again from its start says what is true now.
    #[test]
    fn a_kept_fdinfo_file_reads_afresh() {
        use std::{io::Seek, os::unix::fs::FileExt};
        let mut file = tempfile::tempfile().unwrap();
        let path = format!("/proc/self/fdinfo/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
        let info = std::fs::File::open(path).unwrap();
        let pos = |info: &std::fs::File| {
            let mut buf = [0u8; 1024];
            let n = info.read_at(&mut buf, 0).unwrap();
            super::fdinfo_field(std::str::from_utf8(&buf[..n]).unwrap(), "pos")
        };
        assert_eq!(pos(&info), Some(0));
        file.seek(std::io::SeekFrom::Start(42)).unwrap();
        assert_eq!(pos(&info), Some(42));
    }
}
