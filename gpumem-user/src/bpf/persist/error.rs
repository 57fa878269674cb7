//! What can go wrong with the pins, each saying what to do.
use std::{io, path::Path};

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error(
        "{path} is not on a bpf filesystem ({why}); mount one (`mount -t bpf bpf /sys/fs/bpf`) or give a \
         --pin-dir inside one"
    )]
    NoBpffs { path: String, why: String },
    #[error(
        "gpumem state of another build ({found}) is pinned at {dir}, and this agent ({ours}) cannot take it \
         over: {why}. Start the agent of that build, or run `gpumem detach --pin-dir {root}` to remove it \
         (its counts and limit usage are lost; processes then holding memory are counted from their next \
         call) and start again"
    )]
    OtherBuild { root: String, dir: String, found: String, ours: String, why: String },
    #[error(
        "gpumem state of {count} build(s) is pinned at {root}, and which build's programs count cannot be \
         told: {why}. Run `gpumem detach --pin-dir {root}` (counts and limit usage are lost; processes then \
         holding memory are counted from their next call) and start again"
    )]
    Interrupted { root: String, count: usize, why: String },
    #[error(
        "{holder} is using the gpumem pins at {root} (an agent starting, taking over or running, or `gpumem \
         detach`): stop it first (SIGTERM; with --persist an agent's probes stay pinned), then try again"
    )]
    InUse { root: String, holder: String },
    #[error(
        "gpumem state is pinned at {0} (an agent ran with --persist): start with --persist to adopt it, \
         or run `gpumem detach` to remove it first"
    )]
    Pinned(String),
    #[error(
        "{left} program(s) of the unpinned links were still loaded after {secs} s: the kernel detaches them in \
         its own time, or something else holds them (check with `bpftool prog`)"
    )]
    Detaching { left: usize, secs: u64 },
    #[error(
        "settling the takeover interrupted at {root}: removing build {build}'s pins (its programs stand by): \
         {source}. Starting again tries once more; `gpumem detach --pin-dir {root}` removes every build's"
    )]
    Settling { root: String, build: String, source: Box<PersistError> },
    #[error("pinning {path}: {why}")]
    Pin { path: String, why: String },
    #[error("reading the maps of gpumem's eBPF object: {0}")]
    Object(String),
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: io::Error },
}

pub fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PersistError + 'a {
    move |source| PersistError::Io { what, path: path.display().to_string(), source }
}
