//! Writing the rules pods get (`pods.rs` decides which): at start-up, at
//! each health step, at once when a process of a pod not seen yet execs,
//! and when the policy changes; a pod's rules go with its cgroup.
use super::{
    held::Held,
    pods::{self, Pod},
    policy::{Limit, Target},
    table::{Devices, Installed, LimitError, Origin},
    Limits, Released,
};
use crate::enrich::kubepods;

impl Limits {
    /// A process of pod `uid` exec'd: if no rule on pods has looked at
    /// that pod yet, look now (its first allocation may follow at once).
    pub fn saw_pod<'a>(&mut self, uid: &str, read: &dyn Fn() -> Held<'a>) {
        if self.pods.is_new(uid) {
            self.sync_pods(read);
        }
    }

    /// Makes the rules the pods on this node get, rewrites those whose
    /// rule changed, and clears those of pods gone (or no longer matched).
    pub fn sync_pods<'a>(&mut self, read: &dyn Fn() -> Held<'a>) {
        if self.pods.templates.is_empty() && self.pods.made.is_empty() && self.pods.totals.is_empty() {
            if let Err(e) = self.hold.arm(false) {
                tracing::warn!("{}", crate::chain(&e));
            }
            return;
        }
        let cgroups = self.table.cgroup_root().map(kubepods::pod_cgroups).unwrap_or_default();
        let pods: Vec<Pod> = cgroups
            .into_iter()
            .map(|cgroup| Pod { names: self.pods.names.pod(&cgroup.uid), cgroup })
            .collect();
        self.pods.seen = pods.iter().map(|p| p.cgroup.uid.clone()).collect();
        let wanted = pods::wanted(&self.pods.templates, &pods);
        let gone: Vec<(String, Option<u32>)> =
            self.pods.made.keys().filter(|k| !wanted.contains_key(*k)).cloned().collect();
        for (path, device) in gone {
            if let Some(rule) = self.pods.made.remove(&(path.clone(), device)) {
                match self.clear_one_rule(&Target::Cgroup(path), device) {
                    Ok(()) => tracing::info!("limit cleared on {} ({})", rule.limit.target, rule.origin),
                    Err(e) => tracing::warn!("{}", crate::chain(&e)),
                }
            }
        }
        for (key, rule) in wanted {
            if self.pods.made.get(&key) == Some(&rule) {
                continue;
            }
            let set = self
                .table
                .resolve(&rule.limit, None, Origin::Pod(rule.origin.clone()))
                .and_then(|r| self.set_rule(r, read));
            match set {
                Ok(i) => {
                    tracing::info!("{} ({})", super::describe("limit", &i), rule.origin);
                    self.pods.failed.remove(&key);
                    self.pods.made.insert(key, rule);
                }
                Err(e) if self.pods.failed.insert(key) => {
                    tracing::warn!("{}: {}", rule.origin, crate::chain(&e))
                }
                Err(_) => {}
            }
        }
        self.sync_totals(&pods, read);
        if let Err(e) = self.write_hold(&pods) {
            tracing::warn!("{}", crate::chain(&e));
        }
    }

    /// The kernel's side of holding new pods' processes at exec: the
    /// cgroups pods are made in, the pods seen (named, so their rules are
    /// made; or unnamed for longer than `pods::GIVE_UP`), armed while rules
    /// on pods are in force.
    fn write_hold(&mut self, pods: &[Pod]) -> Result<(), LimitError> {
        let now = std::time::Instant::now();
        let unnamed = &mut self.pods.unnamed_since;
        unnamed.retain(|uid, _| pods.iter().any(|p| &p.cgroup.uid == uid && p.names.is_none()));
        self.pods.gave_up.retain(|uid| unnamed.contains_key(uid));
        let mut seen = std::collections::HashSet::new();
        for p in pods {
            if p.names.is_none() {
                let since = *unnamed.entry(p.cgroup.uid.clone()).or_insert(now);
                if now.duration_since(since) < pods::GIVE_UP {
                    continue;
                }
                if self.pods.gave_up.insert(p.cgroup.uid.clone()) {
                    tracing::warn!(
                        "pod {} ({}): no log directory under /var/log/pods names it after {:?}; its processes \
                         go on without the rules on pods (is /var/log/pods mounted into the agent?)",
                        p.cgroup.uid,
                        p.cgroup.path,
                        pods::GIVE_UP
                    );
                }
            }
            seen.insert(p.cgroup.id);
        }
        let root = self.table.cgroup_root().map(std::path::Path::to_path_buf);
        let parents = root.as_deref().map(kubepods::parent_cgroups).unwrap_or_default();
        let parents = parents.iter().filter_map(|p| root.as_deref().map(|r| kubepods::id_of(r, p))).collect();
        self.hold.set_parents(parents)?;
        self.hold.set_seen(seen)?;
        self.hold.arm(!self.pods.templates.is_empty())
    }

    /// A `held` record: the process waits for its pod's rules; made now
    /// if the pod can be named, and whoever's pod is seen goes on.
    pub fn pod_held<'a>(
        &mut self,
        origin: crate::decode::Origin,
        pod: u64,
        read: &dyn Fn() -> Held<'a>,
    ) -> Vec<Released> {
        self.hold.held(origin, pod);
        self.sync_pods(read);
        self.hold.release_seen()
    }

    /// The health step's part: the heartbeat, the pods looked at again,
    /// and whoever's pod is seen now goes on.
    pub fn pods_step<'a>(&mut self, read: &dyn Fn() -> Held<'a>) -> Vec<Released> {
        if let Err(e) = self.hold.beat() {
            tracing::warn!("{}", crate::chain(&e));
        }
        self.sync_pods(read);
        self.hold.release_seen()
    }

    /// The agent stops: no one is held from now, and everyone held goes on.
    pub fn stop_holding(&mut self) -> Vec<Released> {
        self.hold.stop()
    }

    /// `gpumem limit set` of a rule on pods: kept beside the others (one
    /// on the same pods and devices replaced), and applied at once.
    pub(super) fn set_pod_rule<'a>(
        &mut self,
        limit: &Limit,
        read: &dyn Fn() -> Held<'a>,
    ) -> Result<Installed, LimitError> {
        let described = self.table.resolve(limit, None, Origin::Operator)?;
        let templates = &mut self.pods.templates;
        templates.retain(|t| !(t.target == limit.target && t.device == limit.device));
        templates.push(limit.clone());
        self.sync_pods(read);
        Ok(described)
    }

    /// `gpumem limit clear` of a rule on pods: every rule made of it goes.
    /// (`namespace:NS` clears both kinds of rule on the namespace.)
    pub(super) fn clear_pod_rule(&mut self, target: &Target) -> Result<Installed, LimitError> {
        let named = |t: &Target| match (t, target) {
            (Target::NamespaceTotal(a), Target::Namespace(b)) => a == b,
            _ => t == target,
        };
        let Some(at) = self.pods.templates.iter().position(|t| named(&t.target)) else {
            return Err(LimitError::NoSuchLimit(target.to_string()));
        };
        let first = self.pods.templates[at].clone();
        self.pods.templates.retain(|t| !named(&t.target));
        self.sync_pods(&|| Held::of(Vec::new()));
        self.table.resolve(&first, None, Origin::Operator)
    }

    /// Takes the rule on `target` for `device` out of force.
    fn clear_one_rule(&mut self, target: &Target, device: Option<u32>) -> Result<(), LimitError> {
        let devices = device.map_or(Devices::All, Devices::One);
        if let Some(i) = self.table.clear_rule(target, devices)? {
            self.forget_slots(&i)?;
        }
        self.names = self.table.names();
        Ok(())
    }
}
