//! What one scrape shows: the agent's state at that moment.
use super::counts::EventCounts;
use crate::output::{LimitStatus, StatusReport};

/// The snapshot a scrape encodes.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// The usage table, devices (NVML) and the record counters, as `gpumem
    /// status` reports them.
    pub status: StatusReport,
    /// The limits in force, with what each counts now.
    pub limits: Vec<LimitStatus>,
    pub counts: EventCounts,
    /// Ring-buffer items that were not records.
    pub malformed: u64,
    /// Probes attached, over every library.
    pub probes: u64,
}
