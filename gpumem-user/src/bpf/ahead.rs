//! What loading the object will ask the kernel, asked on threads while the
//! agent searches for the driver's libraries: whether it makes multi-uprobe
//! links (a test link closed, a grace period of waiting), whether uprobe
//! programs may write registers, and the kernel's BTF, read and parsed
//! (which the multi-link loader relocates against). Each answer is kept for
//! the process (a `OnceLock`), so a start that finds one missing asks for
//! it itself, and a start that does not need one never waits for it.
//!
//! Waited for before the object is opened: no thread of these is left
//! running, or exiting, when the agent attaches its tracepoints (the kernel
//! rewrites the exit path's text then; see `multi::supported`).
use std::thread::JoinHandle;

use super::{
    kernel_btf::kernel_btf,
    multi::{self, register_writes, LinkMode},
};

/// The questions under way.
pub struct Ahead(Vec<JoinHandle<()>>);

impl Ahead {
    /// Starts asking what a start with links `mode` (and `--bpf-log` or
    /// not) will need.
    pub fn start(mode: LinkMode, bpf_log: bool) -> Self {
        let multi = mode != LinkMode::Single && !bpf_log;
        let mut threads = vec![std::thread::spawn(move || {
            let _ = register_writes::refusal();
            if multi {
                let _ = multi::supported();
            }
        })];
        if multi {
            threads.push(std::thread::spawn(|| {
                let _ = kernel_btf();
            }));
        }
        Self(threads)
    }

    /// Waits until every question has its answer.
    pub fn wait(self) {
        for t in self.0 {
            // A thread that panicked left its OnceLock empty: the start
            // asks again itself.
            let _ = t.join();
        }
    }
}
