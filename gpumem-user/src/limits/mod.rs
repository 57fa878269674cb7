//! Limits, as the agent owns them: the user's policy (`policy/`), the
//! rules written into the kernel's limit maps (`table.rs`), what targets
//! held when their limits were set at run time (`carried.rs`, `matcher.rs`),
//! the limits workloads declare in their environment (`declared.rs`) and
//! the names the records give each rule. The decision itself is made in
//! the kernel at each allocation (gpumem-ebpf's limits.rs); this module
//! only writes rules, bases and the word on declared limits.
pub mod carried;
pub mod declared;
pub mod matcher;
pub mod policy;
pub mod table;

use std::{collections::HashMap, path::PathBuf};

use gpumem_common::{ns, LiveAlloc, LiveKey};

use self::{
    carried::{Carried, Entry},
    declared::Declarations,
    policy::{config::Policy, Action, Limit, Target},
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
        let names = table.names();
        let declared = Declarations::open(tracer)?;
        let mut limits =
            Self { table, carried: Carried::default(), names, declared, can, running: Vec::new() };
        limits.declare(policy)?;
        Ok((limits, installed))
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
        let names = table.names();
        let declared = Declarations::open(tracer)?;
        let mut limits =
            Self { table, carried: Carried::default(), names, declared, can, running: Vec::new() };
        limits.declare(policy)?;
        limits.carry_again(live, held);
        if apply_rules {
            limits.reload(policy, live, "start-up policy over the adopted limits");
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
            let base = self.table.base(i.slot);
            if base == 0 {
                continue;
            }
            let entries = self.covered(&i.limit, live, |a| !charged.contains(&(i.slot, a.tgid, a.key)));
            let total = self.carried.carry(i.slot, &entries);
            let target = &i.limit.target;
            if total > base {
                self.carried.drop_slot(i.slot);
                tracing::warn!(
                    "the limit on {target} carries {base} bytes its target held when it was set, and its \
                     target holds {total} bytes not counted under it: the base stays whole until the limit \
                     is set again or cleared"
                );
            } else if total < base {
                match self.table.write_base(i.slot, total) {
                    Ok(()) => tracing::info!(
                        "the limit on {target}: {} of the {base} bytes it carried were freed while no agent ran",
                        base - total
                    ),
                    Err(e) => tracing::warn!("{}", crate::chain(&e)),
                }
            }
        }
    }

    /// Sets a limit at run time (see `LimitTable::set`); a new target's
    /// live allocations (among `live`) are carried in its base until freed.
    pub fn set(&mut self, limit: &Limit, live: &[LiveAllocation<'_>]) -> Result<Installed, LimitError> {
        let entries = self.covered(limit, live, |_| true);
        let total = entries.iter().map(|e| e.2).sum();
        let (installed, new) = self.table.set(limit, total)?;
        if new {
            self.carried.carry(installed.slot, &entries);
        }
        self.names = self.table.names();
        Ok(installed)
    }

    /// The allocations among `live` that `limit`'s target holds (and
    /// `also` keeps), as carried entries.
    fn covered(
        &self,
        limit: &Limit,
        live: &[LiveAllocation<'_>],
        also: impl Fn(&LiveAllocation<'_>) -> bool,
    ) -> Vec<Entry> {
        let m = self.table.matcher(&limit.target, limit.device);
        live.iter()
            .filter(|a| m.covers(a.tgid, a.comm, a.cgroup_id, a.device) && also(a))
            .map(|a| (a.tgid, a.key, a.size))
            .collect()
    }

    /// Takes the limit on `target` out of force.
    pub fn clear(&mut self, target: &Target) -> Result<Installed, LimitError> {
        let installed = self.table.clear(target)?;
        self.carried.drop_slot(installed.slot);
        self.table.write_base(installed.slot, 0)?;
        self.names = self.table.names();
        Ok(installed)
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
            // An allocation at a carried address replaces one whose free
            // was never seen, as the kernel treats it.
            Body::Alloc(c) => self.carried.freed(tgid, (ns::for_kind(c.kind), c.addr)),
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
    pub fn reload(&mut self, policy: &Policy, live: &[LiveAllocation<'_>], why: &str) {
        self.table.set_default_action(policy.default_action);
        if let Err(e) = self.declare(policy) {
            tracing::warn!("{why}: {}", crate::chain(&e));
        }
        for target in self.table.targets() {
            if !policy.limits.iter().any(|l| l.target == target) {
                match self.clear(&target) {
                    Ok(_) => tracing::info!("{why}: limit cleared on {target}"),
                    Err(e) => tracing::warn!("{why}: {}", crate::chain(&e)),
                }
            }
        }
        for limit in &policy.limits {
            match self.set(limit, live) {
                Ok(i) => tracing::info!("{why}: {}", describe("limit", &i)),
                Err(e) => tracing::warn!("{why}: {}", crate::chain(&e)),
            }
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
