//! A real Prometheus server for the metrics test: Debian's `prometheus`
//! package (bookworm, the host's release), its server binary kept in
//! `~/.cache/gpumem/prometheus/`. Only the binary is used: the test starts
//! it on a loopback port with a scrape configuration of its own, so
//! nothing is installed on the host and no service is started.
use std::{fs, path::PathBuf, process::Command};

use anyhow::Context;

use crate::{
    apt::Apt,
    util::{cache_dir, run},
};

/// The server binary, from the cache or fetched into it.
pub fn server() -> anyhow::Result<PathBuf> {
    let dir = cache_dir().join("prometheus");
    let bin = dir.join("prometheus");
    if bin.exists() {
        return Ok(bin);
    }
    eprintln!("xtask: fetching Debian's prometheus package (bookworm) for the metrics test");
    let apt = Apt::new("apt-prometheus", &[("bookworm", "main")])?;
    apt.update()?;
    let work = dir.join("deb");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let deb = apt.download("prometheus", &work)?;
    let tree = work.join("tree");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree))?;
    let unpacked = tree.join("usr/bin/prometheus");
    let partial = dir.join("prometheus.partial");
    fs::copy(&unpacked, &partial)
        .with_context(|| format!("{} holds no usr/bin/prometheus", deb.display()))?;
    fs::rename(&partial, &bin)?;
    fs::remove_dir_all(&work)?;
    Ok(bin)
}
