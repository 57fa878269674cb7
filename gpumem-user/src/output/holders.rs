//! `holders`: who held the memory when a call ran out of it. Carried by
//! every `alloc_failed` with result 2 (the driver out of memory: the
//! holders on that device) and every limit decision (the holders under
//! that limit).
use serde::{Deserialize, Serialize};

use super::status::SplitLine;

/// The top holders at the moment of the record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holders {
    /// The device looked at (absent: every device, where the call's
    /// device was not known, or a limit on every device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// Bytes covered (on that device, or under that limit) over every
    /// holder, listed or not, as gpumem counts them.
    pub total: u64,
    /// The device's memory and use, where NVML knows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    /// The processes holding the most, most first.
    pub processes: Vec<Holder>,
    /// The cgroups holding the most, most first.
    pub cgroups: Vec<Holder>,
}

/// One process or cgroup, and what it holds of what is covered.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holder {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    pub cgroup: Option<String>,
    pub bytes: u64,
    pub split: Vec<SplitLine>,
}
