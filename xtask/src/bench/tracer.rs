//! A tracer (the agent, its floor, bpftrace) running for one
//! configuration, started when it says it is ready, stopped on drop.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};

use super::setup::Built;
use crate::util::interrupt;

/// A tracer running for one configuration; stopped on drop.
pub struct Tracer(pub Option<Child>, Vec<String>);

impl Tracer {
    pub fn start(mut c: Command, ready: &str) -> anyhow::Result<(Self, Duration)> {
        let t0 = Instant::now();
        let mut child =
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("starting a tracer")?;
        let (tx, rx) = mpsc::channel();
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as _),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
        }
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(l) if l.trim() == ready => break,
                Ok(l) => seen.push(l),
                Err(_) => {
                    let _ = child.kill();
                    bail!("tracer {c:?} never became ready:\n{}", seen.join("\n"));
                }
            }
        }
        Ok((Self(Some(child), seen), t0.elapsed()))
    }
}

impl Tracer {
    /// What it printed before it said it was ready.
    pub fn seen(&self) -> &[String] {
        &self.1
    }

    pub fn pid(&self) -> Option<u32> {
        self.0.as_ref().map(Child::id)
    }
}

impl Drop for Tracer {
    /// SIGINT, again every 10 s while it has not exited (bpftrace now and
    /// then misses the first), then SIGKILL after the third.
    fn drop(&mut self) {
        let Some(mut c) = self.0.take() else { return };
        for _ in 0..3 {
            interrupt(c.id());
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if !matches!(c.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!("xtask: bench: tracer {} still running 10 s after SIGINT", c.id());
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// How to start `config`'s tracer and the line it says when ready; None
/// for `untraced`, Err when it cannot run here (bpftrace missing).
pub fn tracer_command(
    config: &str,
    b: &Built,
    libcuda: &Path,
    script: &Path,
    bpftrace: &Result<PathBuf, String>,
) -> Result<Option<(Command, &'static str)>, ()> {
    let agent = |verb: &str| {
        let mut c = Command::new(&b.agent);
        c.arg(verb).arg("--libcuda").arg(libcuda);
        c
    };
    Ok(match config {
        "untraced" => None,
        "floor" => Some((agent("floor"), "gpumem: ready")),
        "gpumem" | "gpumem+limits" | "gpumem/hash" => {
            let mut c = agent("run");
            c.arg("--output").arg(b.out.join("events.jsonl"));
            c.arg("--socket").arg(b.out.join("gpumem.sock")).args(["--rescan", "0"]);
            if config == "gpumem+limits" {
                c.args(["--limit", "cgroup:/=1TiB,action=audit"]);
            }
            if config == "gpumem/hash" {
                c.env("GPUMEM_TASK_CALLS", "off");
            }
            Some((c, "gpumem: ready"))
        }
        _ => {
            let mut c = Command::new(bpftrace.as_ref().map_err(|_| ())?);
            c.arg(script);
            Some((c, "ready"))
        }
    })
}
