//! Limits workloads declare in their own environment, as the agent sees
//! them. The kernel reads and enforces them itself, from a process's exec
//! on (gpumem-ebpf's families/declare.rs); the agent tells it which
//! variables to honour, the default action and the cap (`ENV_CONFIG`),
//! reads the environment of processes that were running before it with
//! the kernel's own parsers, and names and lists what is in force.
use std::{collections::HashMap, path::Path};

use aya::maps::{Array, HashMap as BpfHashMap, MapData, MapError};
use gpumem_common::{
    declare::{
        declaration::{Declaration, Defaults, EnvConfig},
        declared::Declared,
        names::{VarName, DEVICES},
        read,
    },
    limit_action, limit_list, limit_view, map_name,
};

use super::{
    policy::{env::EnvPolicy, Action},
    table::LimitError,
};
use crate::{
    bpf::{skipped::SkippedRuns, Tracer},
    output::LimitStatus,
};

/// The program that reads a new image's declarations.
const EXEC_PROGRAM: &str = "process_exec";

/// The kernel's declared limits and what the agent knows of them.
pub struct Declarations {
    config: Array<MapData, EnvConfig>,
    declared: BpfHashMap<MapData, u32, Declared>,
    /// The exec program, and the runs of it the kernel skipped so far (7.x:
    /// an exec whose declaration was not read, see `recover`).
    exec: Option<(SkippedRuns, u64)>,
    /// What each declaring process declared, by pid: from its `declared`
    /// record, or read at start-up.
    seen: HashMap<u32, Declaration>,
    env: EnvPolicy,
    defaults: Defaults,
}

impl Declarations {
    pub fn open(tracer: &mut Tracer) -> Result<Self, LimitError> {
        let exec = tracer.program_fd(EXEC_PROGRAM).map(|fd| {
            let runs = SkippedRuns::of(fd);
            let skipped = runs.now().unwrap_or(0);
            (runs, skipped)
        });
        Ok(Self {
            config: tracer.take_map(map_name::ENV_CONFIG)?,
            declared: tracer.take_map(map_name::DECLARED)?,
            exec,
            seen: HashMap::new(),
            env: EnvPolicy::default(),
            defaults: Defaults::default(),
        })
    }

    /// Tells the kernel which variables to honour, the action of those
    /// that name none, the cap, and what this kernel can do (`can_deny`,
    /// `view_ok`); `tgid_offset`: where a task's tgid sits (0: forks are
    /// not followed).
    pub fn configure(
        &mut self,
        env: EnvPolicy,
        default: Action,
        (can_deny, view_ok): (bool, bool),
        tgid_offset: u32,
    ) -> Result<(), LimitError> {
        let (action, signal) = match default {
            Action::Audit => (limit_action::AUDIT, 0),
            Action::Signal(s) => (limit_action::SIGNAL, s as u32),
            Action::Deny => (limit_action::DENY, 0),
        };
        let config = EnvConfig {
            honour: env.honour,
            default_action: action,
            default_signal: signal,
            view_ok: u32::from(view_ok),
            cap: env.max.unwrap_or(0),
            tgid_offset,
            _pad: 0,
        };
        self.env = env;
        self.defaults = config.defaults(can_deny);
        self.config.set(0, config, 0).map_err(|e| write_error("(declared limits)", e))
    }

    /// Reads the environment of every running process, as the kernel reads
    /// a new image's, and gives the kernel the limits of those that declare
    /// some (unless it has them: read at an exec since the agent started).
    /// Returns them, to be said; `cgroup_root` names their cgroups.
    pub fn read_running(&mut self, cgroup_root: Option<&Path>) -> Vec<Running> {
        let Ok(procs) = procfs::process::all_processes() else { return Vec::new() };
        let mut found = Vec::new();
        for p in procs.flatten() {
            let Ok(raw) = std::fs::read(format!("/proc/{}/environ", p.pid)) else { continue };
            let strings = raw.split(|&b| b == 0).filter(|s| !s.is_empty());
            let decl = read::read_environment(strings, self.env.honour, &self.defaults);
            if decl.found == 0 {
                continue;
            }
            let pid = p.pid as u32;
            if decl.in_force() {
                // An exec since the agent began (the kernel's) wins.
                let noexist = u64::from(aya_obj::generated::BPF_NOEXIST);
                let _ = self.declared.insert(pid, Declared::new(&decl, 0), noexist);
            }
            self.seen.insert(pid, decl);
            let comm = p.stat().map(|s| s.comm).unwrap_or_default();
            found.push(Running { pid, comm, cgroup_id: cgroup_of(pid, cgroup_root), decl });
        }
        found
    }

    /// The health step's part: forgets the declarations of processes gone
    /// (the kernel's too, where their exit's run was skipped), and where
    /// the kernel skipped exec runs since the last step (7.x, see gpumem-
    /// ebpf's `release_gone`), reads every running process's environment
    /// again for the declarations those execs did not record; returns
    /// those found, to be said.
    pub fn recover(&mut self, cgroup_root: Option<&Path>) -> Vec<Running> {
        let alive = |pid: u32| Path::new("/proc").join(pid.to_string()).exists();
        self.seen.retain(|&pid, _| alive(pid));
        let gone: Vec<u32> = self.declared.keys().flatten().filter(|&pid| !alive(pid)).collect();
        for pid in gone {
            let _ = self.declared.remove(&pid);
        }
        let Some((runs, before)) = self.exec.as_mut() else { return Vec::new() };
        let now = runs.now().unwrap_or(*before);
        if now == *before {
            return Vec::new();
        }
        *before = now;
        tracing::info!(
            "the kernel skipped exec runs: reading every process's environment for declared limits"
        );
        self.read_running(cgroup_root)
    }

    /// A process's `declared` record.
    pub fn saw(&mut self, pid: u32, decl: &Declaration) {
        self.seen.insert(pid, *decl);
    }

    /// A process exited: its declared limits went with it in the kernel.
    pub fn exited(&mut self, pid: u32) {
        self.seen.remove(&pid);
    }

    /// Whether some process holds declared limits in the kernel.
    pub fn any(&self) -> bool {
        self.declared.keys().next().is_some()
    }

    /// The name and action a decision record gives the declared limit
    /// `slot` (`limit_list::DECLARED_TOTAL` and up) of process `pid`.
    pub fn rule(&self, slot: u32, pid: u32) -> (String, String) {
        let kept = self.declared.get(&pid, 0).ok();
        let decl = self.seen.get(&pid).or_else(|| parent(pid).and_then(|pp| self.seen.get(&pp)));
        let (var, action) = if slot == limit_list::DECLARED_TOTAL {
            ("GPUMEM_LIMIT".to_string(), kept.map(|k| action_of(k.total.action, k.total.signal)))
        } else {
            let device = (slot - limit_list::DECLARED_DEVICE) as usize;
            let var = decl
                .and_then(|d| d.device_source(device))
                .map_or("environment".into(), |s| VarName { source: s, device }.to_string());
            (var, kept.map(|k| action_of(k.each_action, k.each_signal)))
        };
        (format!("env {var} of pid {pid}"), action.unwrap_or_else(|| "audit".into()))
    }

    /// The declared limits in force, with what each counts now.
    pub fn list(&self) -> Vec<LimitStatus> {
        let mut out = Vec::new();
        for (pid, k) in self.declared.iter().flatten() {
            let decl = self.seen.get(&pid);
            let entry = |device: Option<u32>,
                         var: String,
                         (hard, soft, usage): (u64, u64, u64),
                         action: String,
                         view| {
                LimitStatus {
                    target: format!("pid:{pid}"),
                    device,
                    hard,
                    soft: (soft != 0).then_some(soft),
                    action,
                    view: limit_view::name(view).into(),
                    usage,
                    source: Some(format!("env {var}")),
                }
            };
            if k.total.active != 0 {
                let device = (k.total.device != gpumem_common::DEVICE_ANY).then_some(k.total.device);
                let numbers = (k.total.hard, k.total.soft, k.total_state.usage);
                let action = action_of(k.total.action, k.total.signal);
                out.push(entry(device, "GPUMEM_LIMIT".into(), numbers, action, k.total.view));
            }
            for d in (0..DEVICES).filter(|&d| k.each_set & (1 << d) != 0) {
                let var = decl
                    .and_then(|x| x.device_source(d))
                    .map_or("environment".into(), |s| VarName { source: s, device: d }.to_string());
                let numbers = (k.each[d], 0, k.each_state[d].usage);
                out.push(entry(
                    Some(d as u32),
                    var,
                    numbers,
                    action_of(k.each_action, k.each_signal),
                    k.each_view,
                ));
            }
        }
        out.sort_by(|a, b| (&a.target, a.device).cmp(&(&b.target, b.device)));
        out
    }
}

/// A running process found declaring limits.
pub struct Running {
    pub pid: u32,
    pub comm: String,
    /// Its cgroup v2 id (0: not known).
    pub cgroup_id: u64,
    pub decl: Declaration,
}

/// Process `pid`'s cgroup v2 id, from `/proc/PID/cgroup` under the
/// cgroup2 mount `root` (0 where either says nothing).
fn cgroup_of(pid: u32, root: Option<&Path>) -> u64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return 0 };
    let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) else { return 0 };
    root.and_then(|r| crate::enrich::cgroup::cgroup_id(&r.join(path.trim_start_matches('/'))).ok())
        .unwrap_or(0)
}

fn action_of(code: u32, signal: u32) -> String {
    Action::of(code, signal).to_string()
}

/// Process `pid`'s parent (a forked child has its parent's declaration).
fn parent(pid: u32) -> Option<u32> {
    procfs::process::Process::new(pid as i32).ok()?.stat().ok().map(|s| s.ppid as u32)
}

fn write_error(target: &str, e: MapError) -> LimitError {
    LimitError::Write { target: target.into(), source: Box::new(e) }
}
