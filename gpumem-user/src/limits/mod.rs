//! Limits, as the agent owns them: the user's policy (`policy/`), the
//! rules written into the kernel's limit maps (`table.rs`), what targets
//! held when their limits were set at run time (`carried.rs`, `matcher.rs`),
//! the limits workloads declare in their environment (`declared.rs`) and
//! the names the records give each rule. The decision itself is made in
//! the kernel at each allocation (gpumem-ebpf's limits.rs); this module
//! only writes rules, bases and the word on declared limits.
pub mod carried;
mod container_rules;
pub mod containers;
pub mod declared;
mod held;
pub mod matcher;
mod pod_hold;
mod pod_rules;
mod pod_totals;
pub mod pods;
pub mod policy;
mod setting;
pub mod table;

pub use held::Held;
pub use pod_hold::Released;
use std::{collections::HashMap, path::PathBuf};

use gpumem_common::{ns, LiveAlloc, LiveKey};

use self::{
    carried::Carried,
    declared::Declarations,
    pods::pod_templates,
    policy::{config::Policy, Action, Target},
    table::{Installed, LimitError, LimitTable},
};
use crate::{
    bpf::Tracer,
    decode::{Body, Event},
    ledger::LiveAllocation,
    output::LimitStatus,
};

/// The rules in force, their bases, and their names; the declared limits.
pub struct Limits {
    table: LimitTable,
    carried: Carried,
    /// By slot: the rule's target and action, for the records.
    names: HashMap<u32, (String, Action)>,
    declared: Declarations,
    /// What this kernel can do for declared limits: deny, and tell a
    /// process its limit's view.
    can: (bool, bool),
    /// Processes found declaring limits at start-up (or at a reread of
    /// the file), until the agent writes their records.
    running: Vec<declared::Running>,
    /// The containers bound by a declaration of theirs.
    containers: containers::Containers,
    /// The operator's rules on pods, and the rules made of them.
    pods: pods::PodRules,
    /// Processes the kernel holds at exec until their pod's rules are made.
    hold: pod_hold::PodHold,
}

impl Limits {
    /// Takes the kernel's limit maps out of `tracer` and installs
    /// `policy`'s rules (nothing is held under them yet). `deny_reason`:
    /// why this kernel cannot deny (None: it can).
    pub fn install(
        tracer: &mut Tracer,
        policy: &Policy,
        cgroup_root: Option<PathBuf>,
        deny_reason: Option<String>,
    ) -> Result<(Self, Vec<Installed>), LimitError> {
        let can = (deny_reason.is_none(), tracer.view_refusal().is_none());
        let mut table = LimitTable::open(tracer, cgroup_root, deny_reason, policy.default_action)?;
        let installed = table.install(policy)?;
        let limits = Self::over(tracer, table, can, policy)?;
        let root = limits.table.cgroup_root();
        let pods = root.map(crate::enrich::kubepods::pod_cgroups).unwrap_or_default();
        pod_hold::continue_stopped_in_pods(&pods.into_iter().map(|p| p.path).collect::<Vec<_>>());
        Ok((limits, installed))
    }

    /// The limits of `table` (its rules written), with the declared
    /// limits opened and configured by `policy`.
    fn over(
        tracer: &mut Tracer,
        table: LimitTable,
        can: (bool, bool),
        policy: &Policy,
    ) -> Result<Self, LimitError> {
        let mut limits = Self {
            names: table.names(),
            table,
            carried: Carried::default(),
            declared: Declarations::open(tracer)?,
            can,
            running: Vec::new(),
            containers: Default::default(),
            pods: pods::PodRules { templates: pod_templates(policy), ..Default::default() },
            hold: pod_hold::PodHold::open(tracer)?,
        };
        limits.declare(policy)?;
        Ok(limits)
    }

    /// Tells the kernel the policy's word on declared limits, and reads
    /// the declarations of the processes running now.
    fn declare(&mut self, policy: &Policy) -> Result<(), LimitError> {
        let tgid = crate::bpf::btf_offset::task_tgid();
        if tgid.is_none() && policy.env.honour != 0 {
            tracing::warn!(
                "task_struct.tgid is not in this kernel's BTF: a child forked by a process that declared \
                 limits is not bound by them (one that execs is)"
            );
        }
        self.declared.configure(policy.env, policy.default_action, self.can, tgid.unwrap_or(0))?;
        self.running = self.declared.read_running(self.table.cgroup_root());
        if self.declared.any() {
            self.table.mark_declared()?;
        }
        Ok(())
    }

    /// Takes over the rules an earlier agent left in the kernel, with their
    /// usage and what their bases carry (`--persist`; `held`: the kernel's
    /// live allocations, `live` the ledger's of them), then, where the user
    /// gave rules at start (`apply_rules`), applies `policy` over them as a
    /// reload would. `policy`'s default action holds either way. Returns
    /// the rules in force.
    pub fn adopt(
        tracer: &mut Tracer,
        policy: &Policy,
        apply_rules: bool,
        cgroup_root: Option<PathBuf>,
        deny_reason: Option<String>,
        (live, held): (&[LiveAllocation<'_>], &[(LiveKey, LiveAlloc)]),
    ) -> Result<(Self, Vec<Installed>), LimitError> {
        let can = (deny_reason.is_none(), tracer.view_refusal().is_none());
        let mut table = LimitTable::open(tracer, cgroup_root, deny_reason, policy.default_action)?;
        table.adopt()?;
        let mut limits = Self::over(tracer, table, can, policy)?;
        limits.carry_again(live, held);
        if apply_rules {
            limits.reload(policy, &|| Held::of(live.to_vec()), "start-up policy over the adopted limits");
        }
        let in_force = limits.table.installed();
        Ok((limits, in_force))
    }

    /// What each adopted rule's base carries, found again: the allocations
    /// its target holds that are not charged under it. Those freed while
    /// no agent ran leave the base now; a base the kernel's allocations do
    /// not explain (less is held uncharged than it says) stays whole, as
    /// the earlier agent left it.
    fn carry_again(&mut self, live: &[LiveAllocation<'_>], held: &[(LiveKey, LiveAlloc)]) {
        let charged = carried::charged(held);
        for i in self.table.installed() {
            for (slot, device) in counting_slots(&i) {
                self.carry_again_in(&i, (slot, device), live, &charged);
            }
        }
    }

    /// [`Self::carry_again`] for slot `slot` of rule `i`, which counts
    /// `device`.
    fn carry_again_in(
        &mut self,
        i: &Installed,
        (slot, device): (u32, Option<u32>),
        live: &[LiveAllocation<'_>],
        charged: &std::collections::HashSet<(u32, u32, (u32, u64))>,
    ) {
        let base = self.table.base(slot);
        if base == 0 {
            return;
        }
        let entries =
            self.covered(&i.limit.target, device, live, |a| !charged.contains(&(slot, a.tgid, a.key)));
        let total = self.carried.carry(slot, &entries);
        let target = &i.limit.target;
        if total > base {
            self.carried.drop_slot(slot);
            tracing::warn!(
                "the limit on {target} carries {base} bytes its target held when it was set, and its target \
                 holds {total} bytes not counted under it: the base stays whole until the limit is set again or \
                 cleared"
            );
        } else if total < base {
            match self.table.write_base(slot, total) {
                Ok(()) => tracing::info!(
                    "the limit on {target}: {} of the {base} bytes it carried were freed while no agent ran",
                    base - total
                ),
                Err(e) => tracing::warn!("{}", crate::chain(&e)),
            }
        }
    }

    /// Takes the limits on `target` out of force; the first of them.
    pub fn clear(&mut self, target: &Target) -> Result<Installed, LimitError> {
        // A namespace's total an earlier agent left (`--persist`) is no
        // rule on pods of this one's: cleared as the table's.
        let adopted_total = matches!(target, Target::NamespaceTotal(n) if n.starts_with('('));
        if target.is_pods() && !adopted_total {
            return self.clear_pod_rule(target);
        }
        let cleared = self.table.clear(target)?;
        if adopted_total {
            self.table.forget_members(target);
        }
        for i in &cleared {
            self.forget_slots(i)?;
        }
        self.names = self.table.names();
        cleared.into_iter().next().ok_or_else(|| LimitError::NoSuchLimit(target.to_string()))
    }

    /// A cleared rule's slots carry nothing any more.
    fn forget_slots(&mut self, i: &Installed) -> Result<(), LimitError> {
        for slot in i.slot..=i.slot + i.span() {
            self.carried.drop_slot(slot);
            self.table.write_base(slot, 0)?;
        }
        Ok(())
    }

    /// The rules in force, then the declared limits, with what each
    /// counts now.
    pub fn list(&self) -> Vec<LimitStatus> {
        let mut all = self.table.list();
        all.extend(self.declared.list());
        all
    }

    /// What decides whether an allocation counts under the rule in `slot`,
    /// and the device the rule names.
    pub fn matcher_of(&self, slot: u32) -> Option<(matcher::Matcher, Option<u32>)> {
        self.table.matcher_of(slot)
    }

    /// The target and action of the rule in `slot`, as records name them
    /// (a declared limit's, `slot` past every rule's, is process `pid`'s).
    pub fn rule(&self, slot: u32, pid: u32) -> (String, String) {
        if slot >= gpumem_common::limit_list::DECLARED_TOTAL {
            return self.declared.rule(slot, pid);
        }
        self.names
            .get(&slot)
            .map_or_else(|| (format!("slot {slot}"), "audit".into()), |(t, a)| (t.clone(), a.to_string()))
    }

    /// The health step's part of declared limits (see
    /// `Declarations::recover`): processes found declaring limits that
    /// the kernel did not record, to be said.
    pub fn recover_declared(&mut self) -> Vec<declared::Running> {
        let found = self.declared.recover(self.table.cgroup_root());
        if self.declared.any() {
            if let Err(e) = self.table.mark_declared() {
                tracing::warn!("{}", crate::chain(&e));
            }
        }
        found
    }

    /// The processes found declaring limits at start-up, once.
    pub fn take_running(&mut self) -> Vec<declared::Running> {
        std::mem::take(&mut self.running)
    }

    /// Where the limit counting in `slot` came from, where not the
    /// operator's rules: `env` for a process's own declared limit, the
    /// declaration a container's rule was made of.
    pub fn source(&self, slot: u32) -> Option<String> {
        if slot >= gpumem_common::limit_list::DECLARED_TOTAL {
            return Some("env".into());
        }
        self.table.source_of(slot)
    }

    /// A process's `declared` record (what its exec declared).
    pub fn saw_declaration(&mut self, pid: u32, decl: &gpumem_common::declare::declaration::Declaration) {
        self.declared.saw(pid, decl);
    }

    /// Carried memory freed or gone with its process: lowers the bases of
    /// the limits that carried it. A base that cannot be written is said,
    /// and counts a little more than is held until the next change.
    pub fn follow(&mut self, e: &Event) {
        let tgid = e.origin.pid;
        let changed = match &e.body {
            Body::Alloc(c) => self.carried.allocated(tgid, (ns::for_kind(c.kind), c.addr)),
            Body::Free(c) if !c.untracked => self.carried.freed(tgid, (ns::for_kind(c.kind), c.addr)),
            Body::Exit(_) | Body::Exec(_) => {
                self.declared.exited(tgid);
                self.carried.exited(tgid)
            }
            _ => return,
        };
        for (slot, base) in changed {
            if let Err(e) = self.table.write_base(slot, base) {
                tracing::warn!("{}", crate::chain(&e));
            }
        }
    }

    /// Applies a reread policy (SIGHUP; `why` begins what is said): rules
    /// no longer in it are cleared, new and changed ones set; each change,
    /// and each rule that cannot be applied, is said.
    pub fn reload<'a>(&mut self, policy: &Policy, read: &dyn Fn() -> Held<'a>, why: &str) {
        self.table.set_default_action(policy.default_action);
        if let Err(e) = self.declare(policy) {
            tracing::warn!("{why}: {}", crate::chain(&e));
        }
        // The pods' rules first: one an earlier agent left (adopted as the
        // operator's, on a pod's cgroup) is made the pod's again, not
        // cleared as a rule no longer in the policy.
        self.pods.templates = pod_templates(policy);
        self.sync_pods(read);
        for target in self.table.targets() {
            if !policy.limits.iter().any(|l| l.target == target) {
                match self.clear(&target) {
                    Ok(_) => tracing::info!("{why}: limit cleared on {target}"),
                    Err(e) => tracing::warn!("{why}: {}", crate::chain(&e)),
                }
            }
        }
        for limit in policy.limits.iter().filter(|l| !l.target.is_pods()) {
            match self.set(limit, read) {
                Ok(i) => tracing::info!("{why}: {}", describe("limit", &i)),
                Err(e) => tracing::warn!("{why}: {}", crate::chain(&e)),
            }
        }
    }
}

/// The slots of rule `i` that count, and the device each counts: its own
/// (all devices, or the one it names), or each limited device's after it.
fn counting_slots(i: &Installed) -> Vec<(u32, Option<u32>)> {
    match &i.each {
        None => vec![(i.slot, i.limit.device)],
        Some(each) => {
            (0..).zip(each).filter(|(_, h)| h.is_some()).map(|(d, _)| (i.slot + 1 + d, Some(d))).collect()
        }
    }
}

/// `limit cgroup:/a on device 0: 1024 bytes, soft 512 bytes, action deny`.
pub fn describe(verb: &str, i: &Installed) -> String {
    let soft = i.limit.soft.map_or(String::new(), |s| format!(", soft {s} bytes"));
    let dev = i.limit.device.map_or(String::new(), |d| format!(" on device {d}"));
    format!(
        "{verb} {}{dev}: {} bytes{soft}, action {}, view {}",
        i.limit.target, i.limit.hard, i.action, i.view
    )
}
