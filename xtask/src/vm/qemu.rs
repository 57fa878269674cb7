//! Booting one kernel under QEMU (TCG: KVM guests die on an emulation
//! failure on these machines) and reading the serial console.
use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, Command, Stdio},
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
    /// The guest's own lines (from its first GPUMEM-VM- line on), each
    /// after the kernel's tag and the seconds since the boot: what
    /// [`boot`] echoes, kept for a caller that did not echo them.
    pub echoed: Vec<String>,
    /// The guest said it finished (`GPUMEM-VM-END`).
    pub finished: bool,
    pub timed_out: bool,
    pub wall: Duration,
    /// QEMU's exit status, as it said it.
    pub status: String,
}

impl Boot {
    /// Whether the guest reached gpumem's `/init` (its first line).
    pub fn started(&self) -> bool {
        self.lines.iter().any(|l| l.starts_with("GPUMEM-VM-"))
    }

    /// The console's last `n` lines.
    pub fn tail(&self, n: usize) -> &[String] {
        &self.lines[self.lines.len().saturating_sub(n)..]
    }
}

/// QEMU booting `k` with `initrd`, its console on stdout, at a lower
/// priority (`nice -n 5`: what runs beside the guests, the host's suite in
/// `cargo xtask test`, waits less on them; alone they have every CPU).
fn spawn(k: &Kernel, initrd: &Path) -> anyhow::Result<Child> {
    let append = format!("console=ttyS0 panic=-1 rdinit=/init loglevel=4 {}", k.args);
    Command::new("nice")
        .args(["-n", "5", "qemu-system-x86_64"])
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
        .context("starting qemu-system-x86_64")
}

/// The lines QEMU writes (the guest's console and QEMU's own errors), as
/// they come; the channel closes when QEMU has exited.
fn console(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let streams = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line.trim_end_matches('\r').to_string());
            }
        });
    }
    rx
}

/// Boots `vmlinuz` with `initrd`, keeping the guest's own output (from
/// its first GPUMEM-VM- line on) prefixed with `tag` and the seconds since
/// the boot (echoed to stdout as it comes if `echo`), and the whole
/// console in `log`, each line after the seconds it arrived at (a test's
/// line arrives when it ends: the gaps are the tests' times). Kills the
/// guest after `limit`.
pub fn boot(k: &Kernel, initrd: &Path, log: &Path, limit: Duration, echo: bool) -> anyhow::Result<Boot> {
    let start = Instant::now();
    let tag = k.series;
    let mut child = spawn(k, initrd)?;
    let rx = console(&mut child);
    let mut file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut boot = Boot {
        lines: Vec::new(),
        echoed: Vec::new(),
        finished: false,
        timed_out: false,
        wall: Duration::ZERO,
        status: String::new(),
    };
    let mut guest = false;
    loop {
        let left = limit.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let at = start.elapsed().as_secs_f64();
                writeln!(file, "{at:7.1} {line}")?;
                guest |= line.starts_with("GPUMEM-VM-");
                if guest {
                    let line = format!("[{tag} {at:4.0} s] {line}");
                    if echo {
                        println!("{line}");
                    }
                    boot.echoed.push(line);
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
    boot.status = match child.wait() {
        Ok(status) => status.to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    boot.wall = start.elapsed();
    Ok(boot)
}
