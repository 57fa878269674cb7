//! What the kernel's verifier walked for the agent's programs: the
//! instructions it processed for each (`verified_insns`, kernels 5.16 and
//! later), the number that start-up time follows. Unlike a time it does not
//! drift with the machine's load, so two runs compare exactly.
//!
//! The agent's programs are the ones it holds open (`programs_held`, which
//! `runtime` uses too): their ids come from its `/proc/PID/fdinfo`, their
//! names and counts from the kernel's program list.
use std::collections::{BTreeMap, HashSet};

use anyhow::Context;
use aya::programs::ProgramInfo;

/// Instructions processed per program name.
pub type Verified = BTreeMap<String, u32>;

/// The verifier's counts for the programs process `pid` holds.
pub fn verified(pid: u32) -> anyhow::Result<Verified> {
    let mut out = Verified::new();
    for info in programs_held(pid)? {
        let count = info
            .verified_instruction_count()
            .context("this kernel does not report verified instructions (5.16 and later do)")?;
        out.insert(name(&info), count);
    }
    Ok(out)
}

/// What the kernel says of each eBPF program process `pid` holds open.
pub(super) fn programs_held(pid: u32) -> anyhow::Result<Vec<ProgramInfo>> {
    let ids = program_ids(pid)?;
    let mut out = Vec::new();
    for info in aya::programs::loaded_programs() {
        let info = info.context("listing the kernel's eBPF programs")?;
        if ids.contains(&info.id()) {
            out.push(info);
        }
    }
    Ok(out)
}

/// A program's name as the kernel keeps it (15 characters at most).
pub(super) fn name(info: &ProgramInfo) -> String {
    info.name_as_str().unwrap_or("?").to_string()
}

/// Ids of the eBPF programs process `pid` has open.
fn program_ids(pid: u32) -> anyhow::Result<HashSet<u32>> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut ids = HashSet::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        // An fd closed meanwhile is simply not counted.
        let Ok(text) = std::fs::read_to_string(entry?.path()) else { continue };
        if let Some(id) = prog_id(&text) {
            ids.insert(id);
        }
    }
    Ok(ids)
}

/// The program id in one fd's fdinfo, if the fd is a program (a link's
/// fdinfo names its program too, but has no `prog_type`).
fn prog_id(fdinfo: &str) -> Option<u32> {
    let field = |key: &str| {
        fdinfo.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')).map(str::trim))
    };
    field("prog_type")?;
    field("prog_id")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::prog_id;

    #[test]
    fn program_fds_are_told_from_links() {
        let prog = "pos:\t0\nflags:\t02000002\nprog_type:\t2\nprog_jited:\t1\nprog_id:\t99447\nverified_insns:\t94\n";
        let link = "pos:\t0\nlink_type:\tperf\nlink_id:\t65602\nprog_tag:\tcdd8\nprog_id:\t99437\n";
        assert_eq!(prog_id(prog), Some(99447));
        assert_eq!(prog_id(link), None);
        assert_eq!(prog_id("pos:\t0\n"), None);
    }
}
