//! What the privileged end-to-end tests share: starting the real agent on
//! the simulated driver, running workloads in cgroups made for the test,
//! and reading both sides' numbers. Every wait is for a condition, with a
//! deadline that fails the test with context.
use std::{
    io::{BufRead, BufReader, Write},
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use gpumem::{cmd::run::READY, control::StatusReport, enrich::cgroup};
use serde_json::Value;

use crate::truth::Checkpoint;

/// How long any one condition may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Built artifacts the tests run.
pub struct Paths {
    pub root: PathBuf,
    pub agent: PathBuf,
    pub libcuda: PathBuf,
    pub workload: PathBuf,
}

pub fn paths() -> Paths {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let p = Paths {
        agent: target.join("debug/gpumem"),
        libcuda: target.join("simcuda/libcuda.so.1"),
        workload: target.join("debug/gpumem-workload"),
        root,
    };
    for f in [&p.agent, &p.libcuda, &p.workload] {
        assert!(
            f.exists(),
            "{} is missing: run the tests with `cargo xtask test`, which builds it",
            f.display()
        );
    }
    p
}

/// True when the test can load eBPF; otherwise prints why it is skipped.
pub fn privileged(test: &str) -> bool {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip(test, "needs root to load eBPF programs and attach uprobes; `cargo xtask test` runs it as root");
    false
}

/// Says on stdout, past libtest's capture (so it shows for a passing
/// test), that `test` did not run and why; `cargo xtask test` counts these.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stdout().lock(), "SKIPPED {test}: {why}");
}

/// None when this kernel lets uprobe programs write registers (what the
/// deny action needs), else the reason `gpumem probe` gives.
pub fn register_write_refusal() -> Option<String> {
    let out = Command::new(paths().agent).args(["probe", "--json"]).output().expect("running gpumem probe");
    assert!(out.status.success(), "gpumem probe failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("gpumem probe --json prints JSON");
    let caps = v["capabilities"].as_array().expect("a capability list");
    let writes = caps.iter().find(|c| c["name"] == "uprobe_register_writes").expect("uprobe_register_writes");
    (writes["available"] != true).then(|| writes["reason"].as_str().unwrap_or("").to_string())
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("gpumem-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Collects a child's stream line by line on a thread.
fn collect_lines(
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

/// The real agent, attached to the simulated driver.
pub struct Agent {
    child: Option<Child>,
    pub output: PathBuf,
    pub socket: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
    _scratch: Scratch,
}

impl Agent {
    /// Starts `gpumem run` and returns once it says it is ready.
    pub fn start(extra: &[&str]) -> Self {
        let p = paths();
        let scratch = Scratch::new("agent");
        let output = scratch.0.join("events.jsonl");
        let socket = scratch.0.join("gpumem.sock");
        let mut child = Command::new(&p.agent)
            .arg("run")
            .arg("--libcuda")
            .arg(&p.libcuda)
            .arg("--output")
            .arg(&output)
            .arg("--socket")
            .arg(&socket)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the agent");
        let (stderr, rx) = collect_lines(child.stderr.take().unwrap());
        let until = Instant::now() + DEADLINE;
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(line) if line == READY => break,
                Ok(_) => {}
                Err(_) => {
                    let status = child.try_wait().ok().flatten();
                    panic!(
                        "the agent did not become ready (exit {status:?}); its stderr:\n{}",
                        stderr.lock().unwrap().join("\n")
                    );
                }
            }
        }
        Self { child: Some(child), output, socket, stderr, _scratch: scratch }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Sends `signal` to the agent (SIGHUP: reread --config).
    pub fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().expect("the agent runs").id();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid as i32, signal) };
    }

    /// `gpumem limit ARGS` against this agent: (success, stdout, stderr).
    pub fn limit(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(paths().agent)
            .arg("limit")
            .args(args)
            .arg("--socket")
            .arg(&self.socket)
            .output()
            .expect("running gpumem limit");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// `gpumem limit list --json`, parsed.
    pub fn limits(&self) -> Vec<Value> {
        let (ok, out, err) = self.limit(&["list", "--json"]);
        assert!(ok, "gpumem limit list failed: {err}");
        serde_json::from_str::<Value>(&out).expect("a JSON list").as_array().cloned().unwrap_or_default()
    }

    /// Every complete line the agent has written so far, parsed (a read can
    /// land in the middle of a write: a last line without its newline is
    /// not complete yet).
    pub fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.output).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("agent wrote a line that is not JSON ({e}): {l}"))
            })
            .collect()
    }

    /// Waits until `pred` holds for the agent's lines, and returns them.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let until = Instant::now() + DEADLINE;
        loop {
            let lines = self.lines();
            if pred(&lines) {
                return lines;
            }
            if Instant::now() > until {
                panic!(
                    "timed out waiting for {what}; the agent wrote:\n{}\nstderr:\n{}",
                    lines.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the stream holds a checkpoint's calls for its process.
    pub fn wait_for_checkpoint(&self, c: &Checkpoint) -> Vec<Value> {
        self.wait_for(&format!("the records of checkpoint {c:?}"), |lines| {
            count(lines, c.pid, "alloc") == c.allocs
                && count(lines, c.pid, "free") == c.frees
                && count(lines, c.pid, "alloc_failed") == c.failed
        })
    }

    /// Waits until `cond` holds for `gpumem status`; fails with the last
    /// status and the agent's `dropped` and `exit` records.
    pub fn wait_for_status(&self, what: &str, cond: impl Fn(&StatusReport) -> bool) -> StatusReport {
        self.wait_for_state(what, || self.status(), cond)
    }

    /// Waits until `cond` holds for what `read` returns, failing the test
    /// after [`DEADLINE`] with the last state read and the agent's `exit`
    /// and `dropped` records.
    pub fn wait_for_state<T: std::fmt::Debug>(
        &self,
        what: &str,
        read: impl Fn() -> T,
        cond: impl Fn(&T) -> bool,
    ) -> T {
        let until = Instant::now() + DEADLINE;
        loop {
            let s = read();
            if cond(&s) {
                return s;
            }
            if Instant::now() > until {
                let lines: Vec<String> = self
                    .lines()
                    .iter()
                    .filter(|l| l["event"] == "dropped" || l["event"] == "exit")
                    .map(Value::to_string)
                    .collect();
                panic!("timed out waiting for {what}; last seen: {s:#?}\nrecords:\n{}", lines.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

    /// SIGINT, then the agent's exit status and every line it wrote.
    pub fn stop(mut self) -> (ExitStatus, Vec<Value>) {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let status = child.wait().expect("waiting for the agent");
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

/// Waits until `cond` holds, failing the test after [`DEADLINE`].
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The rule for `target` in `gpumem limit list --json`'s answer.
pub fn rule<'a>(limits: &'a [Value], target: &str) -> Option<&'a Value> {
    limits.iter().find(|l| l["target"] == target)
}

/// Records of `event` for process `pid`.
pub fn count(lines: &[Value], pid: u32, event: &str) -> u64 {
    lines.iter().filter(|l| l["event"] == event && l["pid"] == pid).count() as u64
}

/// A child cgroup v2 made for one test (with its parents), removed on drop.
pub struct Cgroup {
    pub dir: PathBuf,
    /// The path as gpumem reports it (relative to the cgroup2 root).
    pub path: String,
    pub id: u64,
    /// Directories made, outermost first.
    made: Vec<PathBuf>,
}

impl Cgroup {
    pub fn create(name: &str) -> Self {
        Self::create_nested(name, &[])
    }

    /// `gpumem-test-PID-NAME/NESTED[0]/NESTED[1]/...`.
    pub fn create_nested(name: &str, nested: &[&str]) -> Self {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root = cgroup::cgroup2_mount(&mountinfo).expect("no cgroup2 mount on this host");
        let mut rel = format!("gpumem-test-{}-{name}", std::process::id());
        let mut made = vec![root.join(&rel)];
        for n in nested {
            rel = format!("{rel}/{n}");
            made.push(root.join(&rel));
        }
        for d in &made {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("creating cgroup {}: {e}", d.display()));
        }
        let dir = made.last().unwrap().clone();
        let id = cgroup::cgroup_id(&dir).unwrap();
        Self { dir, path: format!("/{rel}"), id, made }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have been waited for; an rmdir that still fails
        // leaves an empty cgroup behind, which is harmless.
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
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
        match self.rx.recv_timeout(DEADLINE) {
            Ok(line) => {
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("workload printed `{line}`: {e}"))
            }
            Err(_) => panic!(
                "no checkpoint from workload {} (status {:?}); it printed:\n{}",
                self.child.id(),
                self.child.try_wait().ok().flatten(),
                self.stdout.lock().unwrap().join("\n")
            ),
        }
    }

    /// Lets a paused workload go on past its checkpoint.
    pub fn resume(&mut self) {
        if let Some(stdin) = self.stdin.as_mut() {
            stdin.write_all(b"\n").expect("resuming the workload");
        }
    }

    /// Resumes through every remaining checkpoint until the workload
    /// exits, then [`Self::finish`]es it.
    pub fn run_to_end(mut self) {
        loop {
            self.resume();
            if self.rx.recv_timeout(DEADLINE).is_err() {
                break; // stdout closed: it is exiting
            }
        }
        self.finish();
    }

    /// Every checkpoint until the workload exits, and how it exited (a
    /// limit may have signalled it).
    pub fn until_exit(mut self) -> (Vec<Checkpoint>, ExitStatus) {
        drop(self.stdin.take());
        let mut seen = Vec::new();
        while let Ok(line) = self.rx.recv_timeout(DEADLINE) {
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

/// The status entry of process `pid`.
pub fn proc_entry(s: &StatusReport, pid: u32) -> Option<&gpumem::control::StatusEntry> {
    s.processes.iter().find(|p| p.pid == Some(pid))
}

/// A process's split as `kind:device` -> bytes, the form workloads print.
pub fn split_of(s: &StatusReport, pid: u32) -> std::collections::BTreeMap<String, u64> {
    proc_entry(s, pid)
        .map(|e| {
            e.split
                .iter()
                .map(|x| (format!("{}:{}", x.kind, x.device.map_or("-".into(), |d| d.to_string())), x.bytes))
                .collect()
        })
        .unwrap_or_default()
}

/// The status entry of cgroup `id`.
pub fn cgroup_entry(s: &StatusReport, id: u64) -> Option<&gpumem::control::StatusEntry> {
    s.cgroups.iter().find(|c| c.cgroup_id == id)
}

/// Asserts that the agent's ledger and the kernel both say `pid` holds
/// exactly `held` bytes.
pub fn assert_process_holds(s: &StatusReport, pid: u32, held: u64) {
    let (bytes, kernel) = proc_entry(s, pid).map_or((0, 0), |e| (e.bytes, e.kernel_bytes));
    assert_eq!(
        (bytes, kernel),
        (held, held),
        "process {pid}: (ledger, kernel) bytes vs the workload's truth; status: {s:#?}"
    );
}

/// Asserts that the ledger and the kernel both say cgroup `cg` holds `held`.
pub fn assert_cgroup_holds(s: &StatusReport, cg: &Cgroup, held: u64) {
    let (bytes, kernel) = cgroup_entry(s, cg.id).map_or((0, 0), |e| (e.bytes, e.kernel_bytes));
    assert_eq!(
        (bytes, kernel),
        (held, held),
        "cgroup {}: (ledger, kernel) bytes vs the truth; status: {s:#?}",
        cg.path
    );
}
