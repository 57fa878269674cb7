//! `systemd-analyze` (Debian's `systemd` package; systemd need not be
//! running) on deploy/systemd/gpumem.service: `verify`, on a copy whose
//! ExecStart names an executable that exists here (verify refuses a unit
//! whose binary is missing), and `security --offline`, which rates the
//! unit's sandboxing.
use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context};

use crate::util::{cmd, ensure_tool};

/// Where the unit expects the agent.
const INSTALLED_AGENT: &str = "/usr/local/bin/gpumem";
/// The most exposure `systemd-analyze security` may rate the unit, on its
/// `--threshold` scale (ten times the printed level: 35 is 3.5, "OK").
pub const MAX_EXPOSURE: u32 = 35;

fn systemd_analyze() -> anyhow::Result<PathBuf> {
    ensure_tool("systemd-analyze", "systemd")
}

/// What ExecStart will run in the copies: the built agent, or (not built
/// yet) a stand-in script: verify only checks that the file is executable.
pub fn executable(agent: Option<&Path>, scratch: &Path) -> anyhow::Result<PathBuf> {
    if let Some(agent) = agent.filter(|a| a.exists()) {
        return Ok(agent.to_path_buf());
    }
    fs::create_dir_all(scratch)?;
    let stand_in = scratch.join("gpumem");
    fs::write(&stand_in, "#!/bin/sh\nexit 0\n")?;
    fs::set_permissions(&stand_in, fs::Permissions::from_mode(0o755))?;
    Ok(stand_in)
}

/// A copy of `unit` as `scratch/CASE/gpumem.service` (systemd names a unit
/// by its file name) that runs `agent`, with `edit` applied to its text.
pub fn copy(
    unit: &Path,
    agent: &Path,
    scratch: &Path,
    case: &str,
    edit: impl FnOnce(String) -> anyhow::Result<String>,
) -> anyhow::Result<PathBuf> {
    let text = fs::read_to_string(unit).with_context(|| format!("reading {}", unit.display()))?;
    let from = format!("\nExecStart={INSTALLED_AGENT} ");
    if !text.contains(&from) {
        bail!("{} has no `ExecStart={INSTALLED_AGENT} ...` line: keep the unit starting the installed agent, or update this check", unit.display());
    }
    let text = edit(text.replacen(&from, &format!("\nExecStart={} ", agent.display()), 1))?;
    let dir = scratch.join(case);
    fs::create_dir_all(&dir)?;
    let copy = dir.join("gpumem.service");
    fs::write(&copy, text)?;
    Ok(copy)
}

/// `systemd-analyze verify UNIT`: Ok when it succeeds and says nothing
/// about the unit (an unknown key, a bad value, a missing binary are only
/// warnings to it). Lines about other units (ones the unit pulls in) are
/// shown, not counted.
pub fn verify(unit: &Path) -> anyhow::Result<()> {
    let tool = systemd_analyze()?;
    let out = cmd(&tool).arg("verify").arg(unit).output().with_context(|| format!("starting {tool:?}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let name = unit.file_name().and_then(|n| n.to_str()).unwrap_or("gpumem.service");
    let (about, others): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| l.contains(name));
    for line in others.iter().filter(|l| !l.trim().is_empty()) {
        println!("note: systemd-analyze verify (not about {name}): {line}");
    }
    if !out.status.success() || !about.is_empty() {
        bail!(
            "systemd-analyze verify {} ({}) says:\n{}\nfix deploy/systemd/gpumem.service",
            unit.display(),
            out.status,
            if about.is_empty() { text.trim().to_string() } else { about.join("\n") }
        );
    }
    Ok(())
}

/// `systemd-analyze security --offline=yes --threshold=MAX_EXPOSURE UNIT`:
/// the unit's sandboxing rates no worse than it does now.
pub fn exposure(unit: &Path) -> anyhow::Result<()> {
    let tool = systemd_analyze()?;
    let out = cmd(&tool)
        .args(["security", "--offline=yes", "--no-pager", &format!("--threshold={MAX_EXPOSURE}")])
        .arg(unit)
        .output()
        .with_context(|| format!("starting {tool:?}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let overall = text.lines().find(|l| l.contains("Overall exposure level")).unwrap_or("no overall level");
    if !out.status.success() {
        bail!(
            "systemd-analyze security rates {} above {}.{} ({}): {}\nthe lines marked ✗ are what is open:\n{}",
            unit.display(),
            MAX_EXPOSURE / 10,
            MAX_EXPOSURE % 10,
            out.status,
            overall.trim(),
            text.lines().filter(|l| l.contains('✗')).collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}
