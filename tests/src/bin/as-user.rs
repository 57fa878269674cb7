//! `as-user UID PROGRAM [ARGS...]`: runs PROGRAM as user and group UID,
//! with no supplementary groups (what util-linux's `setpriv --reuid
//! --regid --clear-groups` does; the kernel matrix's busybox has no such
//! option). For the tests of what an unprivileged user can do: the
//! program's exec is the user's.
// It shares the test crate's dependencies with the end-to-end tests.
#![allow(unused_crate_dependencies)]
use std::os::unix::process::CommandExt;

use anyhow::Context;
use nix::unistd::{setgid, setgroups, setuid, Gid, Uid};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: as-user UID PROGRAM [ARGS...]";
    let uid: u32 = args.next().context(usage)?.parse().context(usage)?;
    let program = args.next().context(usage)?;
    setgroups(&[]).context("clearing the supplementary groups")?;
    setgid(Gid::from_raw(uid)).context("setgid")?;
    setuid(Uid::from_raw(uid)).context("setuid")?;
    Err(std::process::Command::new(&program).args(args).exec()).with_context(|| format!("exec {program}"))
}
