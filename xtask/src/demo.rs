//! `cargo xtask demo`: the agent traces demo workloads in two cgroups it
//! creates on the simulated driver, shows the stream and the table, and
//! cleans up.
use std::{
    io::{BufRead, BufReader, Write},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{bail, Context};

use crate::{
    artifacts::{build, Built},
    util::{cmd, is_root, run},
};

const READY: &str = "gpumem: ready";

fn cgroup2_root() -> anyhow::Result<PathBuf> {
    crate::util::cgroup2_root().context("the demo needs a cgroup2 mount for its two teams")
}

/// The demo's cgroups, removed on drop (even when the demo fails).
struct Cgroups(PathBuf);

impl Cgroups {
    fn create(root: &Path) -> anyhow::Result<Self> {
        let base = root.join("gpumem-demo");
        let me = Self(base.clone());
        me.remove(); // leftovers from an interrupted run
        for team in ["team-a", "team-b"] {
            std::fs::create_dir_all(base.join(team))
                .with_context(|| format!("creating {}", base.join(team).display()))?;
        }
        Ok(me)
    }

    fn remove(&self) {
        for team in ["team-a", "team-b"] {
            let _ = std::fs::remove_dir(self.0.join(team));
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        self.remove();
    }
}

struct Job {
    name: &'static str,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Job {
    fn start(
        built: &Built,
        name: &'static str,
        cgroup: PathBuf,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let procs = cgroup.join("cgroup.procs");
        let mut c = Command::new(&built.workload);
        c.arg("--libcuda").arg(&built.libcuda).args(args).arg("--pause").envs(env.iter().copied());
        c.stdin(Stdio::piped()).stdout(Stdio::piped());
        // SAFETY: only a write to cgroup.procs between fork and exec.
        unsafe { c.pre_exec(move || std::fs::write(&procs, b"0")) };
        let mut child = c.spawn().with_context(|| format!("starting workload {name}"))?;
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Ok(Self { name, child, lines })
    }

    /// Waits for the workload's next checkpoint line.
    fn checkpoint(&mut self) -> anyhow::Result<String> {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .with_context(|| format!("workload {} printed no checkpoint", self.name))
    }

    /// Resumes it through every remaining checkpoint until it exits.
    fn finish(mut self) -> anyhow::Result<()> {
        let mut stdin = self.child.stdin.take();
        loop {
            if let Some(s) = stdin.as_mut() {
                let _ = s.write_all(b"\n");
            }
            if self.lines.recv_timeout(Duration::from_secs(60)).is_err() {
                break; // stdout closed: it exited
            }
        }
        drop(stdin);
        let status = self.child.wait()?;
        if !status.success() {
            bail!("workload {} failed: {status}", self.name);
        }
        Ok(())
    }
}

pub fn demo() -> anyhow::Result<()> {
    if !is_root() {
        bail!("cargo xtask demo loads eBPF programs and makes cgroups: run it as root");
    }
    let built = build()?;
    let root = cgroup2_root()?;
    let cgroups = Cgroups::create(&root)?;
    let socket = std::env::temp_dir().join(format!("gpumem-demo-{}.sock", std::process::id()));
    // The demo's own simulated card, shared by its jobs and read by the
    // simulated NVML the agent loads: 64 MiB a device.
    let card = std::env::temp_dir().join(format!("gpumem-demo-{}.card", std::process::id()));
    let card_env = [
        ("SIMCUDA_CARD", card.to_str().context("a temporary path in UTF-8")?),
        ("SIMCUDA_CAPACITY", "67108864"),
    ];
    println!("\n== gpumem run --format text (the event stream)\n");
    let mut agent = start_agent(&built, &socket, &card_env)?;
    let result = run_jobs(&built, &cgroups, &socket, &card_env);
    // Stop the agent: it prints its final usage records and detaches.
    crate::util::interrupt(agent.id());
    let status = agent.wait()?;
    drop(cgroups);
    let _ = std::fs::remove_file(&card);
    result?;
    if !status.success() {
        bail!("the agent exited with {status}");
    }
    println!("\n== demo done: cgroups removed, probes detached");
    Ok(())
}

/// `gpumem run --format text`, once it says it is ready (its messages go
/// on to the terminal).
fn start_agent(built: &Built, socket: &Path, card: &[(&str, &str)]) -> anyhow::Result<Child> {
    let simulated = built.libcuda.parent().context("the simulated driver's directory")?;
    let mut agent = cmd(&built.agent)
        .arg("run")
        .arg("--libcuda")
        .arg(&built.libcuda)
        .args(["--format", "text", "--socket"])
        .arg(socket)
        // The simulated NVML beside the simulated driver, reading the card.
        .env("LD_LIBRARY_PATH", simulated)
        .envs(card.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the agent")?;
    let err = agent.stderr.take().context("the agent's stderr")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("{l}");
            let _ = tx.send(l);
        }
    });
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l == READY => return Ok(agent),
            Ok(_) => {}
            Err(_) => {
                let _ = agent.kill();
                bail!("the agent did not start; see its messages above");
            }
        }
    }
}

/// The three jobs on one card, paused holding memory while `gpumem
/// status` shows them, then run to their ends.
fn run_jobs(built: &Built, cgroups: &Cgroups, socket: &Path, card: &[(&str, &str)]) -> anyhow::Result<()> {
    let a = cgroups.0.join("team-a");
    let b = cgroups.0.join("team-b");
    let trainer = ["--scenario", "threads", "--mix", "--threads", "2", "--iterations", "12"];
    let mut jobs = vec![
        Job::start(built, "trainer", a.clone(), &trainer, card)?,
        Job::start(built, "notebook", a, &["--scenario", "basic", "--device", "1"], card)?,
    ];
    for j in jobs.iter_mut() {
        j.checkpoint()?;
    }
    // Then the inference job fills what is left of device 0 and is refused.
    let mut inference =
        Job::start(built, "inference", b, &["--scenario", "oom", "--size", "16777216"], card)?;
    inference.checkpoint()?;
    jobs.push(inference);
    println!("\n== gpumem status (every workload paused holding memory)\n");
    run(cmd(&built.agent).arg("status").arg("--socket").arg(socket))?;
    println!("\n== the workloads finish; exits release what they leaked\n");
    for j in jobs {
        j.finish()?;
    }
    Ok(())
}
