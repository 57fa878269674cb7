//! The operator's rules on Kubernetes pods (`namespace:team-a`,
//! `pod:team-a/trainer-*`): which rule each pod on this node gets on its
//! own cgroup. Pure: `pod_rules.rs` writes what this decides.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    time::{Duration, Instant},
};

use super::policy::{config::Policy, kube::pod_matches, Limit, Target};
use crate::enrich::{kubepods::PodCgroup, pods::PodNames};

/// How long a pod's processes are held at exec for the kubelet's log
/// directory that names the pod (the kubelet makes it before the pod's
/// sandbox; one not there by then will not be, e.g. `/var/log/pods` not
/// mounted into the agent's container).
pub const GIVE_UP: Duration = Duration::from_secs(3);

/// A pod on this node: its cgroup, and its namespace and name where the
/// kubelet's log directories give them.
#[derive(Debug, Clone)]
pub struct Pod {
    pub cgroup: PodCgroup,
    pub names: Option<(String, String)>,
}

/// A rule one pod gets: the template's numbers on the pod's cgroup, and
/// what the records say it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRule {
    pub limit: Limit,
    pub origin: String,
}

/// The rules on pods, and those made of them.
#[derive(Debug, Default)]
pub struct PodRules {
    /// The policy's rules on pods, in its order.
    pub templates: Vec<Limit>,
    /// The rules made, by pod cgroup and device (None: all devices).
    pub made: BTreeMap<(String, Option<u32>), PodRule>,
    /// The rules made over all pods of a namespace (`per=namespace`), by
    /// namespace and device: as set.
    pub totals: BTreeMap<(String, Option<u32>), Limit>,
    /// Rules that could not be made, said once each.
    pub failed: HashSet<(String, Option<u32>)>,
    /// Pods seen, by UID: a process of another pod makes the agent look.
    pub seen: HashSet<String>,
    /// Pods the kubelet's directories do not name yet, since when: their
    /// processes are held at exec until [`GIVE_UP`], then let go on
    /// without the rules on pods (said once).
    pub unnamed_since: HashMap<String, Instant>,
    /// Pods given up on (said once each).
    pub gave_up: HashSet<String>,
    pub names: PodNames,
}

impl PodRules {
    /// Whether a pod's process names a pod not seen yet (one to look for
    /// at once, if any rule is on pods).
    pub fn is_new(&self, uid: &str) -> bool {
        !self.templates.is_empty() && !self.seen.contains(uid)
    }
}

/// The policy's rules on pods.
pub fn pod_templates(policy: &Policy) -> Vec<Limit> {
    policy.limits.iter().filter(|l| l.target.is_pods()).cloned().collect()
}

/// The rule each pod gets, by pod cgroup and device: of the templates
/// matching it that count the same devices, the smallest (a pod under
/// two rules is held by the tighter).
pub fn wanted(templates: &[Limit], pods: &[Pod]) -> BTreeMap<(String, Option<u32>), PodRule> {
    let mut out: BTreeMap<(String, Option<u32>), PodRule> = BTreeMap::new();
    for pod in pods {
        let Some((ns, name)) = &pod.names else { continue };
        for t in templates.iter().filter(|t| applies(&t.target, ns, name)) {
            let key = (pod.cgroup.path.clone(), t.device);
            if out.get(&key).is_some_and(|r| r.limit.hard <= t.hard) {
                continue;
            }
            let limit = Limit { target: Target::Cgroup(pod.cgroup.path.clone()), ..t.clone() };
            out.insert(key, PodRule { limit, origin: format!("{}, pod {ns}/{name}", t.target) });
        }
    }
    out
}

/// The rules over all pods of a namespace (`per=namespace`), by namespace
/// and device: each template, and the cgroups of its pods on this node.
pub fn totals(
    templates: &[Limit],
    pods: &[Pod],
) -> BTreeMap<(String, Option<u32>), (Limit, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    for t in templates {
        let Target::NamespaceTotal(ns) = &t.target else { continue };
        let members = pods
            .iter()
            .filter(|p| p.names.as_ref().is_some_and(|(n, _)| n == ns))
            .map(|p| p.cgroup.path.clone())
            .collect();
        out.insert((ns.clone(), t.device), (t.clone(), members));
    }
    out
}

fn applies(target: &Target, ns: &str, name: &str) -> bool {
    match target {
        Target::Namespace(n) => n == ns,
        Target::Pod(glob) => pod_matches(glob, ns, name),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(path: &str, ns: &str, name: &str) -> Pod {
        Pod {
            cgroup: PodCgroup { uid: path.into(), path: path.into(), id: 0 },
            names: Some((ns.into(), name.into())),
        }
    }

    fn limit(spec: &str) -> Limit {
        Limit::parse(spec).unwrap()
    }

    #[test]
    fn each_matching_pod_gets_its_own_rule_and_the_smaller_holds() {
        let templates = [
            limit("namespace:team-a=16GiB"),
            limit("pod:team-a/trainer-*=8GiB,action=deny"),
            limit("namespace:team-a=4GiB,device=1"),
        ];
        let pods = [
            pod("/k/a", "team-a", "trainer-0"),
            pod("/k/b", "team-a", "serve-0"),
            pod("/k/c", "team-b", "trainer-0"),
            Pod { names: None, ..pod("/k/d", "team-a", "x") },
        ];
        let got = wanted(&templates, &pods);
        let show: Vec<(String, Option<u32>, u64, String)> =
            got.iter().map(|((p, d), r)| (p.clone(), *d, r.limit.hard >> 30, r.origin.clone())).collect();
        assert_eq!(
            show,
            [
                ("/k/a".into(), None, 8, "pod:team-a/trainer-*, pod team-a/trainer-0".into()),
                ("/k/a".into(), Some(1), 4, "namespace:team-a, pod team-a/trainer-0".into()),
                ("/k/b".into(), None, 16, "namespace:team-a, pod team-a/serve-0".into()),
                ("/k/b".into(), Some(1), 4, "namespace:team-a, pod team-a/serve-0".into()),
            ]
        );
        let a = &got[&("/k/a".to_string(), None)].limit;
        let with_total = [limit("namespace:team-a=64GiB,per=namespace"), limit("pod:team-b/*=1GiB")];
        let totals = totals(&with_total, &pods);
        let (total, members) = &totals[&("team-a".to_string(), None)];
        assert_eq!(
            (total.hard >> 30, members.iter().map(String::as_str).collect::<Vec<_>>()),
            (64, vec!["/k/a", "/k/b"])
        );
        assert_eq!(totals.len(), 1);
        assert!(wanted(&with_total[..1], &pods).is_empty(), "a total is no pod's own rule");
        assert_eq!(
            (a.target.clone(), a.action),
            (Target::Cgroup("/k/a".into()), Some(super::super::policy::Action::Deny))
        );
    }
}
