//! The real agent (`gpumem run`), attached to the simulated driver, and
//! what the tests ask it: its records, `gpumem status`, `gpumem limit`.
use std::{
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
};

use gpumem::{
    cmd::run::READY,
    output::{LimitStatus, Line, RecordEvent, StatusReport},
};

use super::{
    card::SimCard,
    env::{paths, scratch},
    output::Output,
    poll::{poll, poll_moving, Moving, DEADLINE},
    procfs,
    records::{rule, Records},
    workload::collect_lines,
};
use crate::truth::Checkpoint;

pub struct Agent {
    child: Option<Child>,
    output: Output,
    pub socket: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
    _scratch: tempfile::TempDir,
}

impl Agent {
    /// Starts `gpumem run` and returns once it says it is ready. It loads
    /// the simulated NVML (beside the simulated driver), which reads the
    /// host's simulated card.
    pub fn start(extra: &[&str]) -> Self {
        Self::launch(None, extra, &[])
    }

    /// As [`Agent::start`], with no `--libcuda`: the agent finds the
    /// driver's library itself, or waits for one.
    pub fn start_without_driver(extra: &[&str]) -> Self {
        Self::launch(None, &[&["--no-test-libcuda"], extra].concat(), &[])
    }

    /// As [`Agent::start`], its NVML reading `card` (the test's own).
    pub fn start_on(card: &SimCard, extra: &[&str]) -> Self {
        Self::launch(None, extra, &card.env())
    }

    /// As [`Agent::start`], with `env` added to its environment (a library
    /// path to another NVML).
    pub fn start_with_env(env: &[(&str, &str)], extra: &[&str]) -> Self {
        Self::launch(None, extra, env)
    }

    /// As [`Agent::start`], writing records to `output` (default: a file in
    /// the test's scratch directory).
    pub fn start_writing_to(output: Option<PathBuf>, extra: &[&str]) -> Self {
        Self::launch(output, extra, &[])
    }

    /// As [`Agent::start`], writing to `output` (default: a file in the
    /// test's scratch directory) with `env` added to its environment.
    pub fn start_with(output: Option<PathBuf>, env: &[(&str, &str)], extra: &[&str]) -> Self {
        Self::launch(output, extra, env)
    }

    /// Starts the agent and waits for `ready` while its CPU time moves (a
    /// start verifying a large object on a loaded emulated CPU takes more
    /// than a minute): [`DEADLINE`] without CPU time used, 300 s in all.
    fn launch(output: Option<PathBuf>, extra: &[&str], env: &[(&str, &str)]) -> Self {
        use std::sync::mpsc::RecvTimeoutError;
        let (mut agent, rx) = Self::spawn(output, extra, env);
        let pid = agent.pid();
        let mut moving = Moving::new();
        moving.until(&procfs::cpu_ticks(pid));
        loop {
            match rx.recv_timeout(std::time::Duration::from_millis(500)) {
                Ok(line) if line == READY => break,
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => agent.died("the agent did not become ready"),
                Err(RecvTimeoutError::Timeout) => {
                    if std::time::Instant::now() > moving.until(&procfs::cpu_ticks(pid)) {
                        agent.died("the agent did not become ready (a minute without CPU time used, or 300 s in all)")
                    }
                }
            }
        }
        agent
    }

    /// Starts `gpumem run` on `card` with `GPUMEM_STOP_AT=step` (it stops
    /// itself at that step of a takeover), sends it `signals` once it has
    /// stopped, and returns how it exited, its whole stderr and every
    /// record it wrote.
    pub fn start_stopped_at(
        card: &SimCard,
        extra: &[&str],
        step: &str,
        signals: &[nix::sys::signal::Signal],
    ) -> (ExitStatus, String, Vec<Line>) {
        let env = [&card.env()[..], &[("GPUMEM_STOP_AT", step)]].concat();
        let (mut agent, rx) = Self::spawn(None, extra, &env);
        let pid = agent.pid();
        // Waited for while the agent's CPU time moves: it stops after
        // loading, which on a loaded emulated CPU takes more than a minute.
        poll_moving(
            &format!("the agent to stop at {step}"),
            || (procfs::stopped(pid), procfs::cpu_ticks(pid)),
            |s| s.0,
            || agent.stderr(),
        );
        for &signal in signals {
            agent.signal(signal);
        }
        let status = agent.child.take().unwrap().wait().expect("waiting for the agent");
        // Every line it wrote: the reader ends at the pipe's end.
        while rx.recv_timeout(DEADLINE).is_ok() {}
        (status, agent.stderr(), agent.lines())
    }

    fn spawn(
        output: Option<PathBuf>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> (Self, std::sync::mpsc::Receiver<String>) {
        let p = paths();
        let scratch = scratch();
        let output = output.unwrap_or_else(|| scratch.path().join("events.jsonl"));
        let socket = scratch.path().join("gpumem.sock");
        let (bare, extra): (Vec<&str>, Vec<&str>) = extra.iter().partition(|a| **a == "--no-test-libcuda");
        let libcuda: Vec<&std::ffi::OsStr> = match bare.is_empty() {
            true => vec!["--libcuda".as_ref(), p.libcuda.as_os_str()],
            false => Vec::new(),
        };
        let mut child = Command::new(&p.agent)
            .arg("run")
            .args(libcuda)
            .arg("--output")
            .arg(&output)
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .env("LD_LIBRARY_PATH", p.libcuda.parent().unwrap())
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the agent");
        let (stderr, rx) = collect_lines(child.stderr.take().unwrap());
        (Self { child: Some(child), output: Output::new(output), socket, stderr, _scratch: scratch }, rx)
    }

    fn died(&mut self, what: &str) -> ! {
        let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        panic!("{what} (exit {status:?}); its stderr:\n{}", self.stderr())
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the agent runs").id()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits until the agent's stderr says `text` (a takeover that waits
    /// for calls in flight says `took over from build` after `ready`), and
    /// returns the whole of it.
    pub fn wait_for_said(&self, text: &str) -> String {
        poll(&format!("the agent to say `{text}`"), || self.stderr(), |e| e.contains(text), String::new)
    }

    /// Sends `signal` to the agent (SIGHUP: reread --config).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().expect("the agent runs").id();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).expect("signalling the agent");
    }

    /// `gpumem limit ARGS` against this agent: (success, stdout, stderr).
    pub fn limit(&self, args: &[&str]) -> (bool, String, String) {
        limit_through(&self.socket, args)
    }

    /// `gpumem limit list --json`, read.
    pub fn limits(&self) -> Vec<LimitStatus> {
        let (ok, out, err) = self.limit(&["list", "--json"]);
        assert!(ok, "gpumem limit list failed: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("gpumem limit list --json printed {out} ({e})"))
    }

    /// Every complete line the agent has written so far, read as records
    /// (a read can land in the middle of a write: a last line without its
    /// newline is not complete yet).
    pub fn lines(&self) -> Vec<Line> {
        self.output.with(<[Line]>::to_vec)
    }

    /// `f` over [`Agent::lines`], without copying them.
    pub fn with_lines<R>(&self, f: impl FnOnce(&[Line]) -> R) -> R {
        self.output.with(f)
    }

    /// Waits until `pred` holds for the agent's records, and returns them.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&[Line]) -> bool) -> Vec<Line> {
        let last = || self.with_lines(|l| format!("{} records, the last: {:?}", l.len(), l.last()));
        let context = || format!("{}\nstderr:\n{}", last(), self.stderr());
        poll(what, || self.with_lines(&pred), |&ok| ok, context);
        self.lines()
    }

    /// Waits for process `pid`'s `exit` record; every record so far.
    pub fn wait_for_exit(&self, pid: u32) -> Vec<Line> {
        self.wait_for("the exit record", |l| l.count(pid, RecordEvent::Exit) == 1)
    }

    /// Waits until the stream holds a checkpoint's calls for its process.
    pub fn wait_for_checkpoint(&self, c: &Checkpoint) -> Vec<Line> {
        self.wait_for(&format!("the records of checkpoint {c:?}"), |lines| {
            lines.count(c.pid, RecordEvent::Alloc) as u64 == c.allocs
                && lines.count(c.pid, RecordEvent::Free) as u64 == c.frees
                && lines.count(c.pid, RecordEvent::AllocFailed) as u64 == c.failed
        })
    }

    /// Waits until `cond` holds for `read`'s answer (the agent's status,
    /// its limits), failing with the agent's `exit` and `dropped` records.
    pub fn wait_for_state<T: std::fmt::Debug>(
        &self,
        what: &str,
        read: impl Fn() -> T,
        cond: impl Fn(&T) -> bool,
    ) -> T {
        poll(what, read, cond, || {
            let lines = self.lines();
            let shown: Vec<String> = lines
                .all_events(RecordEvent::Exit)
                .iter()
                .map(|l| format!("{l:?}"))
                .chain(lines.dropped().iter().map(|d| format!("{d:?}")))
                .collect();
            format!("records:\n{}", shown.join("\n"))
        })
    }

    /// Waits until the limit on `target` counts `usage` bytes.
    pub fn wait_for_limit_usage(&self, what: &str, target: &str, usage: u64) -> Vec<LimitStatus> {
        self.wait_for_state(what, || self.limits(), |l| rule(l, target).is_some_and(|r| r.usage == usage))
    }

    /// Waits until `cond` holds for `gpumem status`.
    pub fn wait_for_status(&self, what: &str, cond: impl Fn(&StatusReport) -> bool) -> StatusReport {
        self.wait_for_state(what, || self.status(), cond)
    }

    /// `gpumem status --json`, through the CLI.
    pub fn status(&self) -> StatusReport {
        let out = Command::new(paths().agent)
            .args(["status", "--json", "--socket"])
            .arg(&self.socket)
            .output()
            .expect("running gpumem status");
        assert!(out.status.success(), "gpumem status failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "gpumem status printed something else than a report ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// SIGKILL (nothing of the agent runs after it: no drain, no detach),
    /// and every record it wrote.
    pub fn kill(mut self) -> Vec<Line> {
        self.end(nix::sys::signal::Signal::SIGKILL);
        self.lines()
    }

    /// Sends `signal` (SIGINT, SIGTERM: a clean stop; SIGKILL) and waits
    /// for the agent to exit, reading none of its records: how it exited.
    /// An agent still running [`DEADLINE`] after is killed, and the test
    /// fails with its stderr.
    pub fn end(&mut self, signal: nix::sys::signal::Signal) -> ExitStatus {
        let mut child = self.child.take().expect("the agent runs");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signalling the agent");
        // Waited for while its CPU time moves (a drain under load).
        let mut moving = Moving::new();
        loop {
            if let Some(status) = child.try_wait().expect("waiting for the agent") {
                return status;
            }
            if std::time::Instant::now() > moving.until(&procfs::cpu_ticks(pid.as_raw() as u32)) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the agent did not exit after {signal:?}; killed; its stderr:\n{}", self.stderr());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The agent's run, expected to fail before it is ready: how it exited
    /// and its stderr.
    pub fn start_failing(extra: &[&str]) -> (ExitStatus, String) {
        let scratch = scratch();
        Self::start_failing_on(&scratch.path().join("gpumem.sock"), extra)
    }

    /// As [`Agent::start_failing`], on control socket `socket`.
    pub fn start_failing_on(socket: &std::path::Path, extra: &[&str]) -> (ExitStatus, String) {
        let p = paths();
        let out = Command::new(&p.agent)
            .arg("run")
            .arg("--libcuda")
            .arg(&p.libcuda)
            .arg("--duration")
            .arg("5")
            .arg("--socket")
            .arg(socket)
            .args(extra)
            .output()
            .expect("running the agent");
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// SIGINT, then the agent's exit status and every record it wrote.
    pub fn stop(mut self) -> (ExitStatus, Vec<Line>) {
        let status = self.end(nix::sys::signal::Signal::SIGINT);
        (status, self.lines())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `gpumem limit ARGS` through the control socket `socket`: (success,
/// stdout, stderr).
pub fn limit_through(socket: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(paths().agent)
        .arg("limit")
        .args(args)
        .arg("--socket")
        .arg(socket)
        .output()
        .expect("running gpumem limit");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}
