//! The processes of one soak round: threads allocating and freeing
//! through every device family at random (in the audit, deny and signal
//! limits' cgroups, in a container with its own declared limit, and one
//! to be SIGKILLed mid-call), every allocation family on two devices, and
//! a process that execs. Each keeps its last checkpoint: its own truth.
use gpumem_tests::{harness::*, truth::Checkpoint};

use super::{
    plan::Plan,
    tally::Calls,
    world::{World, AUDIT, DENY, FREE, SIGNAL},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Threads in one of the soak's cgroups (index into `World::groups`).
    Threads(usize),
    /// Threads SIGKILLed part way through the round.
    Victim,
    /// Threads in a podman container declaring its own deny limit.
    Container,
    /// Every allocation family, devices 0 and 1.
    Families,
    /// Allocates, then execs itself as `basic`.
    Exec,
}

pub struct Running {
    pub w: Workload,
    pub role: Role,
    pub host_pid: u32,
    /// The last checkpoint it printed.
    pub last: Option<Checkpoint>,
    /// Calls of an image it exec'd from (the records keep its pid).
    pub carried: Calls,
    /// It printed its last line: it exited, or was killed.
    pub gone: bool,
    /// How it exited, once waited for.
    pub status: Option<std::process::ExitStatus>,
    pub container: Option<(Container, String)>,
}

impl Running {
    pub fn spawn(role: Role, args: &[&str], cg: Option<&Cgroup>, card: &SimCard) -> Self {
        let w = Workload::spawn(args, cg, &card.env());
        let host_pid = w.pid();
        Self { w, role, host_pid, last: None, carried: [0; 3], gone: false, status: None, container: None }
    }

    /// Threads in a container of `podman`'s that declares `limit` (deny).
    pub fn contained(
        podman: &Podman,
        rootfs: &std::path::Path,
        name: &str,
        args: &[&str],
        limit: (u64, &str),
    ) -> Self {
        let env = format!("{}MiB,{}", limit.0 >> 20, limit.1);
        let (w, c) = podman.run_with(name, rootfs, (true, &[("GPUMEM_LIMIT", &env)]), args);
        let (host_pid, id) = c.host_pid_and_id();
        let target = format!("cgroup:/libpod_parent/libpod-{id}");
        let mut r = Self {
            w,
            role: Role::Container,
            host_pid,
            last: None,
            carried: [0; 3],
            gone: false,
            status: None,
            container: None,
        };
        r.container = Some((c, target));
        r
    }

    /// Whether its truth is compared with the card (the soak's own card;
    /// the container's workload counts on the host's).
    pub fn on_card(&self) -> bool {
        matches!(self.role, Role::Threads(_) | Role::Victim)
    }

    /// The next checkpoint it prints (None once it has exited), kept.
    pub fn next(&mut self) -> Option<&Checkpoint> {
        let c = self.w.try_checkpoint();
        if c.is_none() {
            self.gone = true;
            return None;
        }
        if let (Some(before), Some(now)) = (&self.last, &c) {
            // After an exec the new image counts from zero; the records
            // of the old one stay under the same pid.
            if before.checkpoint == "before-exec" && now.checkpoint != "before-exec" {
                self.carried = [before.allocs, before.frees, before.failed];
            }
        }
        self.last = c;
        self.last.as_ref()
    }

    /// The calls its truth says it made, once it ran to its end (exit 0;
    /// its last checkpoint counts every call): what its records must
    /// number.
    pub fn calls(&self) -> Option<Calls> {
        if !self.status.is_some_and(|s| s.success()) {
            return None;
        }
        let c = self.last.as_ref()?;
        let k = self.carried;
        Some([k[0] + c.allocs, k[1] + c.frees, k[2] + c.failed])
    }

    /// Waits for it to exit (it has printed its last line) and checks how:
    /// run to its end, or killed where a limit (`killing`: the deny
    /// limits' SIGKILL fallback is in force) or the soak may kill it.
    pub fn wait(&mut self, killing: bool) {
        use std::os::unix::process::ExitStatusExt;
        let status = self.w.wait_status();
        self.status = Some(status);
        // podman reports its container's SIGKILL as exit 137.
        let killed = status.signal() == Some(9) || (self.container.is_some() && status.code() == Some(137));
        let may_be_killed = match self.role {
            Role::Victim => {
                assert!(killed, "process {} (the victim) was not killed: {status:?}", self.host_pid);
                return;
            }
            Role::Threads(g) => g == SIGNAL || (g == DENY && killing),
            Role::Container => killing,
            Role::Families | Role::Exec => false,
        };
        assert!(
            status.success() || (killed && may_be_killed),
            "process {} ({:?}) exited {status:?}; its last checkpoint {:?}",
            self.host_pid,
            self.role,
            self.last
        );
    }

    /// Whether a limit killed it.
    pub fn killed_by_limit(&self) -> bool {
        self.role != Role::Victim && self.status.is_some_and(|s| !s.success())
    }

    /// What it holds now, by its last checkpoint (0 once gone).
    pub fn held(&self) -> u64 {
        match (&self.last, self.gone) {
            (Some(c), false) => c.held,
            _ => 0,
        }
    }
}

/// `gpumem-workload` arguments for threads until told to stop, seeded.
pub fn threads_args(seed: u64, rate: u64) -> Vec<String> {
    let args = ["--scenario", "threads", "--mix", "--threads", "3", "--iterations", "0", "--pause"];
    let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    v.extend(["--rate".into(), rate.to_string(), "--seed".into(), seed.to_string()]);
    v
}

/// Starts a round's processes: two threads processes in the audit cgroup,
/// two in the deny cgroup, one in the signal cgroup, one to be killed, the
/// families and the exec in the free cgroup, and one in a container where
/// podman is.
pub fn start(world: &World, plan: &Plan) -> Vec<Running> {
    let mut procs = Vec::new();
    for (i, role) in
        [(AUDIT, 2), (DENY, 2), (SIGNAL, 1)].iter().flat_map(|&(g, n)| (0..n).map(move |_| g)).enumerate()
    {
        let args = threads_args(plan.seed * 16 + i as u64, plan.rate);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        procs.push(Running::spawn(Role::Threads(role), &args, Some(&world.groups[role]), &world.card));
    }
    let victim = threads_args(plan.seed * 16 + 9, plan.rate);
    let victim: Vec<&str> = victim.iter().map(String::as_str).collect();
    procs.push(Running::spawn(Role::Victim, &victim, Some(&world.groups[FREE]), &world.card));
    let free = Some(&world.groups[FREE]);
    procs.push(Running::spawn(Role::Families, &["--scenario", "families", "--pause"], free, &world.card));
    procs.push(Running::spawn(Role::Exec, &["--scenario", "exec", "--pause"], free, &world.card));
    if let Some((podman, rootfs)) = &world.podman {
        let args = threads_args(plan.seed * 16 + 10, plan.rate);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let name = format!("gpumem-soak-{}-{}", std::process::id(), plan.round);
        procs.push(Running::contained(podman, rootfs, &name, &args, (plan.declared, &world.deny)));
    }
    procs
}
