//! Limits a container declares: a declaration found in one of a
//! container's processes binds the whole container, its cgroup, so every
//! process in it is bound, those that carry no variable too (a shell
//! `podman exec` or `kubectl exec` opened, a child that dropped its
//! environment). The declaring process itself is bound from its exec by
//! the kernel (see `declared.rs`); the container's rules follow as soon as
//! the agent reads the `declared` record. Two processes of one container
//! declaring different values: the smaller holds, device by device. The
//! rules go when the container's cgroup goes.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use gpumem_common::{
    declare::{
        declaration::Declaration,
        names::{VarName, DEVICES},
    },
    limit_view, LimitRule, DEVICE_ANY,
};

use super::policy::{Action, Limit, Target, View};

/// What one container's rules are made of.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    /// The rule over all devices (or one), and whose declaration it is.
    pub total: Option<(LimitRule, u32)>,
    /// Each device's own limit, whose declaration it is, and which
    /// variable said it.
    pub each: [Option<(u64, u32, VarName)>; DEVICES],
    /// The action, signal and view of each device's limit.
    pub each_rule: (u32, u32, u32),
}

/// What a declaration did to its container's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The container had none: its rules are this declaration's.
    Set,
    /// Some of it was below the container's: those parts hold now.
    Tightened,
    /// Nothing of it was below: the container's rules hold as they were.
    Kept,
    /// The container's rules could not be set (`ContainerLimit::reason`).
    Refused,
}

/// What a `declared` record says of its process's container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerLimit {
    /// The container's cgroup, the rules' target (`cgroup:/...`).
    pub target: String,
    pub outcome: Outcome,
    /// The processes whose declarations the container's rules are made of
    /// (the smaller holds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<u32>,
    /// Why the rules could not be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Declared {
    /// Merges process `pid`'s declaration `d` in: the smaller holds.
    pub fn merge(&mut self, pid: u32, d: &Declaration) -> Outcome {
        let fresh = self.total.is_none() && self.each.iter().all(Option::is_none);
        let mut tightened = false;
        if d.total.active != 0 && self.total.is_none_or(|(r, _)| d.total.hard < r.hard) {
            self.total = Some((d.total, pid));
            tightened = true;
        }
        if d.each_error == 0 {
            for (i, mine) in self.each.iter_mut().enumerate() {
                let declared = (d.each_set & (1 << i) != 0).then_some(d.each[i]);
                if let Some(hard) = declared.filter(|&h| mine.is_none_or(|(m, _, _)| h < m)) {
                    let var = VarName { source: d.device_source(i).unwrap_or(0), device: i };
                    *mine = Some((hard, pid, var));
                    self.each_rule = (d.each_action, d.each_signal, d.each_view);
                    tightened = true;
                }
            }
        }
        match (fresh, tightened) {
            (true, _) => Outcome::Set,
            (false, true) => Outcome::Tightened,
            (false, false) => Outcome::Kept,
        }
    }

    /// The rules on cgroup `path` (at most two: all devices, each
    /// device), each with the limit it makes and its devices' limits.
    pub fn rules(&self, path: &str) -> Vec<(Limit, Option<Vec<Option<u64>>>)> {
        let target = Target::Cgroup(path.to_string());
        let mut out = Vec::new();
        if let Some((r, _)) = &self.total {
            out.push((limit(&target, r.hard, r.soft, (r.action, r.signal, r.view), r.device), None));
        }
        if self.each.iter().any(Option::is_some) {
            let each: Vec<Option<u64>> = self.each.iter().map(|e| e.map(|(h, _, _)| h)).collect();
            let hard = each.iter().flatten().copied().max().unwrap_or(0);
            out.push((limit(&target, hard, 0, self.each_rule, DEVICE_ANY), Some(each)));
        }
        out
    }

    /// The processes whose declarations the rules are made of.
    pub fn declarers(&self) -> Vec<u32> {
        let total = self.total.iter().map(|(_, p)| *p);
        let mut pids: Vec<u32> = total.chain(self.each.iter().flatten().map(|(_, p, _)| *p)).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Where each of [`Self::rules`] comes from, for container `short`
    /// (`env GPUMEM_LIMIT of pid 4242 in container 4f1a2b3c4d5e`).
    pub fn sources(&self, short: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Some((_, pid)) = &self.total {
            out.push(format!("env GPUMEM_LIMIT of pid {pid} in container {short}"));
        }
        let mut said: Vec<String> = Vec::new();
        for (_, pid, var) in self.each.iter().flatten() {
            let one = format!("{var} of pid {pid}");
            if !said.contains(&one) {
                said.push(one);
            }
        }
        if !said.is_empty() {
            out.push(format!("env {} in container {short}", said.join(", ")));
        }
        out
    }
}

fn limit(
    target: &Target,
    hard: u64,
    soft: u64,
    (action, signal, view): (u32, u32, u32),
    device: u32,
) -> Limit {
    Limit {
        target: target.clone(),
        hard,
        soft: (soft != 0).then_some(soft),
        action: Some(Action::of(action, signal)),
        fallback: None,
        device: (device != DEVICE_ANY).then_some(device),
        view: Some(if view == limit_view::LIMIT { View::Limit } else { View::Driver }),
    }
}

/// The cgroup of container `id` in cgroup `path` (the path up to the
/// segment that names the container: its processes' cgroup, or an
/// ancestor of theirs).
pub fn container_cgroup(path: &str, id: &str) -> Option<String> {
    let end = path.find(id)? + id.len();
    let end = path[end..].find('/').map_or(path.len(), |i| end + i);
    Some(path[..end].to_string())
}

/// The containers whose declarations bind them, by cgroup path.
#[derive(Debug, Default)]
pub struct Containers {
    pub by_cgroup: HashMap<String, Declared>,
}

#[cfg(test)]
mod tests;
