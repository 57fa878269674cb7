//! Booting one kernel under QEMU (TCG: KVM guests die on an emulation
//! failure on these machines) and reading the serial console.
use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::Context;

use super::kernels::Kernel;

/// Guest CPUs: GPUMEM_VM_SMP, else 2.
fn smp() -> String {
    std::env::var("GPUMEM_VM_SMP").unwrap_or_else(|_| "2".into())
}

/// What one boot produced.
pub struct Boot {
    /// Every console line.
    pub lines: Vec<String>,
    /// The guest said it finished (`GPUMEM-VM-END`).
    pub finished: bool,
    pub timed_out: bool,
    pub wall: Duration,
}

/// Boots `vmlinuz` with `initrd`, echoing the guest's own output (from
/// its first GPUMEM-VM- line on) to stdout prefixed with `tag`, and keeping
/// the whole console in `log`. Kills the guest after `limit`.
pub fn boot(k: &Kernel, initrd: &Path, log: &Path, limit: Duration) -> anyhow::Result<Boot> {
    let start = Instant::now();
    let tag = k.series;
    let append = format!("console=ttyS0 panic=-1 rdinit=/init loglevel=4 {}", k.args);
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", k.cpu, "-smp", &smp(), "-m", "3072"])
        .args(["-nographic", "-no-reboot", "-monitor", "none", "-serial", "stdio"])
        .arg("-kernel")
        .arg(&k.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", append.trim_end()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().expect("piped")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().expect("piped")),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line.trim_end_matches('\r').to_string());
            }
        });
    }
    drop(tx);
    let mut file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut boot = Boot { lines: Vec::new(), finished: false, timed_out: false, wall: Duration::ZERO };
    let mut echo = false;
    loop {
        let left = limit.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                writeln!(file, "{line}")?;
                echo |= line.starts_with("GPUMEM-VM-");
                if echo {
                    println!("[{tag}] {line}");
                }
                boot.finished |= line.starts_with("GPUMEM-VM-END");
                boot.lines.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                boot.timed_out = true;
                let _ = child.kill();
                break;
            }
            // Both streams closed: QEMU exited.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.wait();
    boot.wall = start.elapsed();
    Ok(boot)
}
