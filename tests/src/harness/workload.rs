//! A running workload: the generator (`gpumem-workload`) or any program
//! that prints its ground truth as checkpoints the same way.
use std::{
    io::{BufRead, BufReader, Write},
    os::unix::process::CommandExt,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex},
};

use super::{
    cgroup::Cgroup,
    env::paths,
    poll::{Moving, DEADLINE, MOVING_AT_MOST},
    procfs::cpu_ticks,
};
use crate::truth::Checkpoint;

/// Collects a child's stream line by line on a thread: every line so far,
/// and each as it comes.
pub fn collect_lines(
    r: impl std::io::Read + Send + 'static,
) -> (Arc<Mutex<Vec<String>>>, mpsc::Receiver<String>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let l = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
    (lines, rx)
}

/// A running gpumem-workload.
pub struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<String>,
    stdout: Arc<Mutex<Vec<String>>>,
}

impl Workload {
    /// Starts the workload on the simulated driver, inside `cgroup` if given.
    pub fn spawn(args: &[&str], cgroup: Option<&Cgroup>, env: &[(&str, &str)]) -> Self {
        let p = paths();
        let mut cmd = Command::new(&p.workload);
        cmd.arg("--libcuda").arg(&p.libcuda).args(args).envs(env.iter().copied());
        Self::from_command(cmd, cgroup)
    }

    /// Starts any program that prints checkpoints the way gpumem-workload
    /// does, inside `cgroup` if given.
    pub fn from_command(mut cmd: Command, cgroup: Option<&Cgroup>) -> Self {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        if let Some(cg) = cgroup {
            let procs = cg.dir.join("cgroup.procs");
            // SAFETY: only async-signal-safe work between fork and exec:
            // open, write and close through std's thin wrappers.
            unsafe {
                cmd.pre_exec(move || std::fs::write(&procs, b"0"));
            }
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let (stdout, rx) = collect_lines(child.stdout.take().unwrap());
        Self { child, stdin, rx, stdout }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next checkpoint the workload prints.
    pub fn checkpoint(&mut self) -> Checkpoint {
        self.line()
    }

    /// The next line the workload prints, read as `T`; see
    /// [`Self::next_line`] for how long it is waited for.
    pub fn line<T: serde::de::DeserializeOwned>(&mut self) -> T {
        let started = std::time::Instant::now();
        match self.next_line() {
            Ok(line) => {
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("workload printed `{line}`: {e}"))
            }
            Err(why) => panic!(
                "no checkpoint from workload {} after {:?} ({why}; status {:?}); it printed:\n{}",
                self.child.id(),
                started.elapsed(),
                self.child.try_wait().ok().flatten(),
                self.stdout.lock().unwrap().join("\n")
            ),
        }
    }

    /// The next line the workload prints, or why none came: its stdout
    /// closed, or [`DEADLINE`] passed with the workload using no CPU. A
    /// workload that computes (a Python client importing numba on an
    /// emulated CPU takes tens of seconds) is waited for while its CPU
    /// time moves, [`MOVING_AT_MOST`] at most.
    fn next_line(&self) -> Result<String, String> {
        use std::{sync::mpsc::RecvTimeoutError, time::Instant};
        let pid = self.child.id();
        let mut moving = Moving::new();
        moving.until(&cpu_ticks(pid));
        loop {
            match self.rx.recv_timeout(std::time::Duration::from_millis(500)) {
                Ok(line) => return Ok(line),
                Err(RecvTimeoutError::Disconnected) => return Err("its stdout closed".into()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let ticks = cpu_ticks(pid);
            if Instant::now() > moving.until(&ticks) {
                return Err(format!(
                    "{DEADLINE:?} without CPU time used or {MOVING_AT_MOST:?} in all; {ticks} ticks of CPU"
                ));
            }
        }
    }

    /// The next checkpoint, or None once the workload's stdout closed (it
    /// exited, or was killed).
    pub fn try_checkpoint(&mut self) -> Option<Checkpoint> {
        let line = self.next_line().ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("workload printed `{line}`: {e}")))
    }

    /// Waits for the workload to exit: how it did.
    pub fn wait(mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("waiting for the workload")
    }

    /// Lets a paused workload go on past its checkpoint.
    pub fn resume(&mut self) {
        if let Some(stdin) = self.stdin.as_mut() {
            stdin.write_all(b"\n").expect("resuming the workload");
        }
    }

    /// Lets a paused workload go on, as [`Self::resume`], unless it has
    /// exited (killed by a limit, or by the test): false then.
    pub fn resume_if_alive(&mut self) -> bool {
        match self.stdin.as_mut().map(|s| s.write_all(b"\n").and_then(|_| s.flush())) {
            Some(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => false,
            Some(other) => {
                other.expect("resuming the workload");
                true
            }
            None => false,
        }
    }

    /// Closes its stdin and waits for it to exit: how it did.
    pub fn wait_status(&mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.child.wait().expect("waiting for the workload")
    }

    /// SIGKILL, now (the workload may be inside a driver call).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Resumes through every remaining checkpoint until the workload
    /// exits, then [`Self::finish`]es it.
    pub fn run_to_end(mut self) {
        loop {
            self.resume();
            if self.next_line().is_err() {
                break; // stdout closed: it is exiting
            }
        }
        self.finish();
    }

    /// The checkpoints a paused workload reaches until it exits, resumed
    /// at each (and past the one it is paused at now, if any), and how it
    /// exited.
    pub fn resumed_to_exit(mut self) -> (Vec<String>, ExitStatus) {
        let mut seen = Vec::new();
        loop {
            // A workload not yet at a checkpoint takes this for the next
            // one and runs on, and may have exited (a limit stopped it)
            // by the next: a broken pipe then, nothing to resume.
            if let Some(stdin) = self.stdin.as_mut() {
                match stdin.write_all(b"\n") {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    other => other.expect("resuming the workload"),
                }
            }
            match self.try_checkpoint() {
                Some(c) => seen.push(c.checkpoint),
                None => return (seen, self.wait()),
            }
        }
    }

    /// Every checkpoint until the workload exits, and how it exited (a
    /// limit may have signalled it).
    pub fn until_exit(mut self) -> (Vec<Checkpoint>, ExitStatus) {
        drop(self.stdin.take());
        let mut seen = Vec::new();
        while let Ok(line) = self.next_line() {
            seen.push(
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("workload printed `{line}`: {e}")),
            );
        }
        (seen, self.child.wait().expect("waiting for the workload"))
    }

    /// Closes stdin and waits; panics unless it exited 0.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("waiting for the workload");
        assert!(status.success(), "workload {} failed: {status}", self.child.id());
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
