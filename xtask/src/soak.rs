//! `cargo xtask soak --minutes N`: the soak (tests/tests/e2e/soak) alone,
//! for as long as asked: rounds of random workloads under changing limits
//! while the agent is stopped, restarted, killed, replaced by another
//! build and its disk filled, every byte compared at every checkpoint. It
//! prints each round and a summary, and writes target/soak/report.json.
use anyhow::{bail, Context};

use crate::util::{cmd, is_root, root};

pub fn soak(minutes: u32, seed: Option<u64>, round_seconds: u32) -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "the soak loads eBPF, makes cgroups and mounts a tmpfs: run it as root (sudo cargo xtask soak)"
        );
    }
    if !(15..=60).contains(&round_seconds) {
        bail!("--round-seconds {round_seconds}: a round lasts 15 to 60 s (its outages fit, its records fit the disk)");
    }
    if minutes == 0 {
        bail!("--minutes must be at least 1");
    }
    crate::artifacts::build()?;
    let podman = crate::test::container_runtime()?;
    let mut c = cmd("cargo");
    c.current_dir(root())
        .args([
            "test",
            "-p",
            "gpumem-tests",
            "--test",
            "e2e",
            "soak::",
            "--",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("GPUMEM_SOAK_SECONDS", (u64::from(minutes) * 60).to_string())
        .env("GPUMEM_SOAK_ROUND_SECONDS", round_seconds.to_string())
        .env("GPUMEM_PODMAN", podman);
    if let Some(seed) = seed {
        c.env("GPUMEM_SOAK_SEED", seed.to_string());
    }
    let status = c.status().context("running the soak")?;
    if !status.success() {
        bail!("the soak failed ({status}); its rounds up to the failure are in target/soak/report.json");
    }
    Ok(())
}
