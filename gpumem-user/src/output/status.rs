//! What the agent answers over its control socket: the usage table
//! (`gpumem status`) and the limits in force (`gpumem limit list`). The
//! `usage` line flattens a [`StatusEntry`].
use serde::{Deserialize, Serialize};

use gpumem_common::kind;

use crate::{enrich::container::Container, ledger::Usage};

/// Usage of one process or cgroup, as `status` reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StatusEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    pub cgroup_id: u64,
    pub cgroup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// As the agent's ledger counts it.
    pub bytes: u64,
    /// As the kernel's map counts it (the truth; differs only if records
    /// were lost).
    pub kernel_bytes: u64,
    pub split: Vec<SplitLine>,
}

/// The answer to `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StatusReport {
    pub libraries: Vec<String>,
    /// Whether a libcuda is among them (without one the agent waits for
    /// one: nothing is traced yet).
    #[serde(default)]
    pub libcuda_attached: bool,
    /// Devices as NVML describes them; empty without NVML.
    #[serde(default)]
    pub devices: Vec<DeviceInfo>,
    /// Whether NVML was loaded.
    #[serde(default)]
    pub nvml: bool,
    pub processes: Vec<StatusEntry>,
    pub cgroups: Vec<StatusEntry>,
    /// Records applied to the ledger so far.
    pub records: u64,
    /// Records lost in the kernel (ring buffer full) so far.
    pub dropped: u64,
    /// `alloc`/`free` records that reached the agent after the `exit` of
    /// the process image they belong to (already released with it).
    #[serde(default)]
    pub late_records: u64,
    /// Runs of gpumem's programs the kernel skipped so far (an exit or
    /// exec not seen; see `dropped.skipped_runs`).
    #[serde(default)]
    pub skipped_runs: u64,
    /// Returns whose entry was not seen so far (calls not seen whole).
    #[serde(default)]
    pub unmatched_returns: u64,
    /// Lines the output could not take (a full disk) and dropped so far.
    #[serde(default)]
    pub unwritten: u64,
    /// Memory queries (`cuMemGetInfo`, `cuDeviceTotalMem`) answered with a
    /// limit's view so far.
    #[serde(default)]
    pub view_rewrites: u64,
    /// Slots of the kernel's live table the agent emptied so far: the
    /// allocations of process images that exited or exec'd without
    /// freeing them (their charges went with the image).
    #[serde(default)]
    pub live_slots_reclaimed: u64,
    /// Live allocations the kernel keeps in its hash map because their
    /// slots of the live table were taken, now (each costs the hot path a
    /// hash lookup more while there are any).
    #[serde(default)]
    pub live_spilled: u64,
    /// Entries the kernel forgot from its hash map of live allocations
    /// (`LIVE`: VMM handles, and allocations kept there) since the agent
    /// started: of process images that exited or exec'd without freeing
    /// them.
    #[serde(default)]
    pub live_entries_forgotten: u64,
    /// VMM mappings the kernel forgot since the agent started: of process
    /// images that exited or exec'd without unmapping them.
    #[serde(default)]
    pub vmm_mappings_forgotten: u64,
    /// Cgroups the kernel keeps a total for, now (`CGROUP_USAGE`, 16,384
    /// at most): each that ever charged, until a sweep after an exit finds
    /// it removed holding nothing (never where the agent cannot see the
    /// host's whole cgroup2 tree).
    #[serde(default)]
    pub cgroup_entries: u64,
    /// Totals the kernel forgot since the agent started: of cgroups that
    /// were removed holding nothing (found at the sweep after an exit).
    #[serde(default)]
    pub cgroup_entries_forgotten: u64,
    /// Processes released (they hold nothing) whose usage entry the kernel
    /// keeps, now: kept at an exit for the process's last threads, deleted
    /// once /proc says every thread is gone (the next health step).
    #[serde(default)]
    pub released_entries: u64,
    /// Whether the agent is idle: it read no record for a second and
    /// stopped its drain timer, and the next record wakes it.
    #[serde(default)]
    pub idle: bool,
    /// Times a record woke the agent from idle since it started.
    #[serde(default)]
    pub idle_wakes: u64,
    /// Bytes of the ring buffer that programs had reserved past what the
    /// agent could read when it answered (it reads everything first): a
    /// record still being written and those behind it, 0 but for moments.
    /// One that stays says a record never committed holds up the stream.
    #[serde(default)]
    pub ring_unread_bytes: u64,
}

impl StatusReport {
    /// Bytes `pid` holds on device `device` in the kinds that live in the
    /// device's own memory (device, array, VMM; not managed or host), as
    /// the agent counts them: what NVML's per-process figure can be
    /// compared with.
    pub fn resident(&self, pid: u32, device: u32) -> u64 {
        self.processes
            .iter()
            .filter(|e| e.pid == Some(pid))
            .flat_map(|e| &e.split)
            .filter(|l| l.device == Some(device) && kind::ON_DEVICE.iter().any(|&k| kind::name(k) == l.kind))
            .map(|l| l.bytes)
            .sum()
    }
}

/// One device as the driver (NVML) describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub total_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    /// Per-process usage as the driver counts it (includes what gpumem
    /// cannot see: context and module memory).
    pub processes: Vec<DriverProcess>,
}

/// One process's usage of a device, as the driver counts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverProcess {
    pub pid: u32,
    pub used_bytes: Option<u64>,
}

/// A rule's place in the kernel and what it counts now, as `gpumem limit
/// list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LimitStatus {
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    pub hard: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft: Option<u64>,
    pub action: String,
    /// What processes under it are told the card has: `limit` or `driver`.
    #[serde(default)]
    pub view: String,
    /// Bytes charged or reserved under it, as the kernel counts them.
    pub usage: u64,
    /// Where it came from, where not the agent's own rules: `env
    /// GPUMEM_LIMIT` (declared by the process in its environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// Bytes held by one (kind, device) pair.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SplitLine {
    pub kind: String,
    pub device: Option<u32>,
    pub bytes: u64,
}

impl SplitLine {
    /// `usage`'s split, one line per (kind, device).
    pub fn of(usage: &Usage) -> Vec<SplitLine> {
        usage
            .split
            .iter()
            .map(|(&(k, device), &bytes)| SplitLine { kind: kind::name(k).to_string(), device, bytes })
            .collect()
    }
}
