//! What stays for the whole soak: the simulated card, the pins, the
//! output's disk, the limits file, the cgroups, podman; and how the limits
//! are changed (the file and SIGHUP, the control socket).
use std::path::PathBuf;

use gpumem_tests::harness::*;

use super::plan::Plan;

/// The soak's cgroups, by index.
pub const AUDIT: usize = 0;
pub const DENY: usize = 1;
pub const SIGNAL: usize = 2;
pub const FREE: usize = 3;

const MIB: u64 = 1 << 20;

/// What stays for the whole soak: the card, the pins, the output's disk,
/// the limits file, the cgroups, podman.
pub struct World {
    pub card: SimCard,
    pub pins: PinDir,
    pub disk: Tmpfs,
    pub config: PathBuf,
    pub groups: Vec<Cgroup>,
    pub podman: Option<(Podman, PathBuf)>,
    /// The deny action as this kernel takes it: `deny`, or where uprobe
    /// programs cannot write registers, deny with SIGKILL as its fallback
    /// (the process crossing is killed, never let past).
    pub deny: String,
    _scratch: tempfile::TempDir,
}

impl World {
    pub fn new() -> Self {
        let scratch = scratch();
        let config = scratch.path().join("gpumem.toml");
        std::fs::write(&config, "").unwrap();
        // No SKIPPED line without podman: the soak runs, without its
        // container, and says so in its report.
        let podman = std::env::var_os("GPUMEM_PODMAN").and_then(|_| Podman::available()).map(|p| {
            let rootfs = p.rootfs("soak", false);
            (p, rootfs)
        });
        Self {
            card: SimCard::new(1 << 40),
            pins: PinDir::new("soak"),
            disk: Tmpfs::mount(256 * MIB),
            config,
            groups: ["soak-audit", "soak-deny", "soak-signal", "soak-free"].map(Cgroup::create).into(),
            podman,
            deny: match register_write_refusal() {
                None => "action=deny".into(),
                Some(why) => {
                    println!("soak: deny falls back to SIGKILL on this kernel: {why}");
                    "action=deny,fallback=signal:SIGKILL".into()
                }
            },
            _scratch: scratch,
        }
    }

    /// The limit target of cgroup `g`.
    pub fn target(&self, g: usize) -> String {
        format!("cgroup:{}", self.groups[g].path)
    }

    /// The limits file: `audit` on the audit cgroup (None: none, so a
    /// reload clears it), the plan's
    /// `signal:SIGKILL` limit on the signal cgroup and its deny limit on
    /// the deny cgroup; SIGHUP; waited for. (The file is the policy: a
    /// reload, and a start with `--config`, clear rules it does not hold,
    /// those set through the control socket included.)
    pub fn set_limits(&self, agent: &Agent, plan: &Plan, audit: Option<u64>) {
        let entry = |g: usize, hard: u64, action: &str| {
            let path = &self.groups[g].path;
            format!("[[limit]]\ncgroup = \"{path}\"\nhard = \"{}MiB\"\n{action}\n", hard / MIB)
        };
        let deny = match self.deny.split_once(",fallback=") {
            Some((_, fallback)) => format!("action = \"deny\"\nfallback = \"{fallback}\""),
            None => "action = \"deny\"".into(),
        };
        let audit_rule = audit.map_or(String::new(), |a| entry(AUDIT, a, "action = \"audit\""));
        let text = audit_rule
            + &entry(SIGNAL, plan.signal, "action = \"signal:SIGKILL\"")
            + &entry(DENY, plan.deny, &deny);
        std::fs::write(&self.config, text).unwrap();
        // The agent says what each reload did, a line per rule: one more
        // line than before is this reload's (equal rules read back say
        // nothing of it).
        let reloads = || agent.stderr().lines().filter(|l| l.contains("SIGHUP: ")).count();
        let before = reloads();
        agent.signal(nix::sys::signal::Signal::SIGHUP);
        let (a, s, d) = (self.target(AUDIT), self.target(SIGNAL), self.target(DENY));
        agent.wait_for_state(
            "the limits file reread",
            || (reloads(), agent.limits()),
            |(n, l)| {
                *n > before
                    && audit.map_or(rule(l, &a).is_none(), |h| rule_is(l, &a, h))
                    && rule_is(l, &s, plan.signal)
                    && rule_is(l, &d, plan.deny)
            },
        );
    }

    /// The deny limit raised through the control socket; waited for.
    pub fn raise_deny(&self, agent: &Agent, hard: u64) {
        let target = self.target(DENY);
        let (ok, _, err) = agent.limit(&["set", &format!("{target}={}MiB,{}", hard / MIB, self.deny)]);
        assert!(ok, "gpumem limit set: {err}");
        agent.wait_for_state("the deny limit raised", || agent.limits(), |l| rule_is(l, &target, hard));
    }
}

fn rule_is(limits: &[gpumem::output::LimitStatus], target: &str, hard: u64) -> bool {
    rule(limits, target).is_some_and(|r| r.hard == hard)
}
