//! The rules the agent makes of containers' declarations (`containers.rs`):
//! set at a `declared` record from one of a container's processes, so
//! that every process of the container is bound; cleared when the
//! container's cgroup goes.
use gpumem_common::{declare::declaration::Declaration, LIMITS_PER_CALL};

use super::{
    containers::{container_cgroup, ContainerLimit, Outcome},
    policy::Target,
    table::Origin,
    Held, Limits,
};

impl Limits {
    /// Process `pid`'s declaration `d`, the process in container `id`
    /// (`place`: its cgroup's path and the container's id): the
    /// container's rules made of it, or tightened, or kept (the smaller
    /// holds); what the record is to say. None for a process in no
    /// container, or a declaration with nothing in force.
    pub fn declared_in_container<'a>(
        &mut self,
        pid: u32,
        d: &Declaration,
        place: Option<(&str, &str)>,
        read: &dyn Fn() -> Held<'a>,
    ) -> Option<ContainerLimit> {
        let (cgroup, id) = place?;
        let path = container_cgroup(cgroup, id)?;
        if !d.in_force() {
            return None;
        }
        let mut rules = self.containers.by_cgroup.get(&path).cloned().unwrap_or_default();
        let mut outcome = rules.merge(pid, d);
        let target = format!("cgroup:{path}");
        let reason = match outcome {
            Outcome::Kept => None,
            _ => self.set_container_rules(&path, &rules, id, read).err(),
        };
        if reason.is_some() {
            outcome = Outcome::Refused;
        } else {
            self.containers.by_cgroup.insert(path, rules.clone());
        }
        Some(ContainerLimit { target, outcome, held_by: rules.declarers(), reason })
    }

    /// Writes container `id`'s rules on cgroup `path`, unless the kernel
    /// could then leave out an operator's rule (it checks at most
    /// `LIMITS_PER_CALL` a call: a declaration must not push one out).
    fn set_container_rules<'a>(
        &mut self,
        path: &str,
        rules: &super::containers::Declared,
        id: &str,
        read: &dyn Fn() -> Held<'a>,
    ) -> Result<(), String> {
        let made = rules.rules(path);
        let operators = self.table.operator_rules_over(path);
        if operators + made.len() > LIMITS_PER_CALL {
            return Err(format!(
                "{operators} rule(s) of the operator's apply to this container already, and the kernel checks {} \
                 a call: the container's own would push one out; each declaring process stays bound by its own \
                 declaration",
                LIMITS_PER_CALL
            ));
        }
        let short = &id[..id.len().min(12)];
        for ((limit, each), source) in made.into_iter().zip(rules.sources(short)) {
            let rule =
                self.table.resolve(&limit, each, Origin::Declared(source)).map_err(|e| crate::chain(&e))?;
            self.set_rule(rule, read).map_err(|e| crate::chain(&e))?;
        }
        Ok(())
    }

    /// The health step's part: clears the rules of containers whose cgroup
    /// is gone, and frees the slots of rules cleared a while ago that count
    /// nothing any more.
    pub fn forget_gone_containers(&mut self) {
        let root = self.table.cgroup_root().map(std::path::Path::to_path_buf);
        let gone: Vec<String> = self
            .containers
            .by_cgroup
            .keys()
            .filter(|p| root.as_ref().is_some_and(|r| !r.join(p.trim_start_matches('/')).is_dir()))
            .cloned()
            .collect();
        for path in gone {
            self.containers.by_cgroup.remove(&path);
            match self.clear(&Target::Cgroup(path.clone())) {
                Ok(_) => {
                    tracing::info!("the container of cgroup {path} is gone: its declared limits with it")
                }
                Err(e) => {
                    tracing::warn!("clearing the declared limits of cgroup {path}: {}", crate::chain(&e))
                }
            }
        }
        self.table.reclaim();
    }
}
