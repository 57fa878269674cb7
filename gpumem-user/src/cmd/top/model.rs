//! What `gpumem top` shows, from the agent's answer: the table's rows
//! (cgroups, pods and containers, each followed by its processes), sorted
//! and filtered; the devices with gpumem's view beside NVML's. Pure: no
//! terminal here.
use std::collections::BTreeMap;

use gpumem_common::kind;

use crate::{
    cli::SortBy,
    cmd::status::pod_name,
    output::{SplitLine, StatusEntry, TopReport},
};

/// What a row is about: kept across refreshes to keep the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKey {
    Group(u64),
    Process(u32),
}

/// One line of the table: a cgroup (pod, container) or a process in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    pub key: RowKey,
    /// A group's label (pod, else cgroup path) or a process's command.
    pub name: String,
    pub bytes: u64,
    pub split: &'a [SplitLine],
}

impl Row<'_> {
    pub fn pid(&self) -> Option<u32> {
        match self.key {
            RowKey::Process(pid) => Some(pid),
            RowKey::Group(_) => None,
        }
    }

    /// Bytes of memory kind `kind` (a `kind::name`), over every device.
    pub fn kind_bytes(&self, kind: &str) -> u64 {
        self.split.iter().filter(|l| l.kind == kind).map(|l| l.bytes).sum()
    }
}

/// A cgroup and the processes whose latest call was in it.
struct Group<'a> {
    id: u64,
    entry: Option<&'a StatusEntry>,
    label: String,
    processes: Vec<&'a StatusEntry>,
}

impl Group<'_> {
    fn bytes(&self) -> u64 {
        self.entry.map_or(0, |e| e.bytes)
    }

    fn first_pid(&self) -> u32 {
        self.processes.iter().filter_map(|p| p.pid).min().unwrap_or(u32::MAX)
    }
}

/// The label of a cgroup: `namespace/pod/container` for a pod (as
/// `gpumem status` names it), else its path.
pub fn group_label(e: &StatusEntry) -> String {
    let pod = pod_name(e);
    if !pod.is_empty() {
        return pod;
    }
    e.cgroup.clone().unwrap_or_else(|| format!("cgroup {}", e.cgroup_id))
}

/// Whether `e` (a process or a cgroup) matches the filter `needle`
/// (lowercase): its command, cgroup path, pod, namespace or container
/// name or id.
pub fn matches(e: &StatusEntry, needle: &str) -> bool {
    let has = |s: Option<&str>| s.is_some_and(|s| s.to_lowercase().contains(needle));
    let c = e.container.as_ref();
    has(e.comm.as_deref())
        || has(e.cgroup.as_deref())
        || has(c.and_then(|c| c.pod.as_deref()))
        || has(c.and_then(|c| c.namespace.as_deref()))
        || has(c.and_then(|c| c.name.as_deref()))
        || has(c.map(|c| c.id.as_str()))
}

/// The table: each group that matches `filter` (or holds a process that
/// does), followed by its processes that match (all of them where the
/// group itself does), in `sort` order.
pub fn rows<'a>(report: &'a TopReport, sort: SortBy, filter: Option<&str>) -> Vec<Row<'a>> {
    let needle = filter.map(str::to_lowercase).filter(|f| !f.is_empty());
    let mut groups = groups(report);
    if let Some(n) = &needle {
        groups.retain_mut(|g| {
            let whole = g.entry.is_some_and(|e| matches(e, n)) || g.label.to_lowercase().contains(n.as_str());
            if !whole {
                g.processes.retain(|p| matches(p, n));
            }
            whole || !g.processes.is_empty()
        });
    }
    sort_groups(&mut groups, sort);
    let mut rows = Vec::new();
    for g in groups {
        let split = g.entry.map_or(&[][..], |e| &e.split);
        rows.push(Row { key: RowKey::Group(g.id), name: g.label.clone(), bytes: g.bytes(), split });
        rows.extend(g.processes.iter().map(|p| Row {
            key: RowKey::Process(p.pid.unwrap_or(0)),
            name: p.comm.clone().unwrap_or_else(|| "?".into()),
            bytes: p.bytes,
            split: &p.split,
        }));
    }
    rows
}

/// Processes grouped by the cgroup of their latest call; cgroups no
/// listed process is in appear alone.
fn groups(report: &TopReport) -> Vec<Group<'_>> {
    let mut by_id: BTreeMap<u64, Group<'_>> = report
        .status
        .cgroups
        .iter()
        .map(|e| {
            (e.cgroup_id, Group { id: e.cgroup_id, entry: Some(e), label: group_label(e), processes: vec![] })
        })
        .collect();
    for p in report.status.processes.iter().filter(|p| p.pid.is_some()) {
        by_id
            .entry(p.cgroup_id)
            .or_insert_with(|| Group {
                id: p.cgroup_id,
                entry: None,
                label: group_label(p),
                processes: vec![],
            })
            .processes
            .push(p);
    }
    by_id.into_values().collect()
}

fn sort_groups(groups: &mut [Group<'_>], sort: SortBy) {
    for g in groups.iter_mut() {
        match sort {
            SortBy::Bytes => g.processes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid))),
            SortBy::Pid => g.processes.sort_by_key(|p| p.pid),
            SortBy::Name => g.processes.sort_by(|a, b| a.comm.cmp(&b.comm).then(a.pid.cmp(&b.pid))),
        }
    }
    match sort {
        SortBy::Bytes => groups.sort_by(|a, b| b.bytes().cmp(&a.bytes()).then(a.label.cmp(&b.label))),
        SortBy::Pid => groups.sort_by_key(|g| (g.first_pid(), g.id)),
        SortBy::Name => groups.sort_by(|a, b| a.label.cmp(&b.label).then(a.id.cmp(&b.id))),
    }
}

/// One device: what NVML says of it and what gpumem counts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRow<'a> {
    pub index: u32,
    pub name: Option<&'a str>,
    pub used: Option<u64>,
    pub total: Option<u64>,
    /// Bytes gpumem counts in the device's own memory (the device, array
    /// and VMM kinds; not managed or host), over every process.
    pub held: u64,
}

/// Every device NVML knows or some process holds memory on, in index
/// order.
pub fn devices(report: &TopReport) -> Vec<DeviceRow<'_>> {
    let mut rows: BTreeMap<u32, DeviceRow<'_>> = report
        .status
        .devices
        .iter()
        .map(|d| {
            let row = DeviceRow {
                index: d.index,
                name: d.name.as_deref(),
                used: d.used_bytes,
                total: d.total_bytes,
                held: 0,
            };
            (d.index, row)
        })
        .collect();
    let on_device: Vec<&str> = kind::ON_DEVICE.iter().map(|&k| kind::name(k)).collect();
    let lines = report.status.processes.iter().flat_map(|p| &p.split);
    for l in lines.filter(|l| on_device.contains(&l.kind.as_str())) {
        let Some(index) = l.device else { continue };
        let row =
            rows.entry(index).or_insert(DeviceRow { index, name: None, used: None, total: None, held: 0 });
        row.held = row.held.saturating_add(l.bytes);
    }
    rows.into_values().collect()
}

/// The memory kinds the table has columns for: those any row holds, in
/// `kind` order, `device` always.
pub fn kinds_in_use(rows: &[Row<'_>]) -> Vec<&'static str> {
    (0..kind::CONTEXT)
        .map(kind::name)
        .filter(|&k| k == kind::name(kind::DEVICE) || rows.iter().any(|r| r.kind_bytes(k) != 0))
        .collect()
}

#[cfg(test)]
mod tests;
