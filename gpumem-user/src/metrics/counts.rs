//! Counters the agent keeps for the metrics only: limit decisions per rule
//! and action, failed allocations per device and result. Counted from the
//! records as they are applied, from the agent's start.
use std::collections::BTreeMap;

/// A limit decision's key: the rule's target, `hard` or `soft`, and the
/// action (`audit`, `signal:9`, `deny`; for a soft limit the rule's).
pub type DecisionKey = (String, &'static str, String);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EventCounts {
    pub decisions: BTreeMap<DecisionKey, u64>,
    /// (device, the driver's CUresult) -> failed allocations.
    pub failures: BTreeMap<(Option<u32>, u32), u64>,
}

impl EventCounts {
    /// One limit decision.
    pub fn decision(&mut self, target: &str, soft: bool, action: &str) {
        let level = if soft { "soft" } else { "hard" };
        *self.decisions.entry((target.to_string(), level, action.to_string())).or_default() += 1;
    }

    /// One allocation the driver refused.
    pub fn failure(&mut self, device: Option<u32>, result: u32) {
        *self.failures.entry((device, result)).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_key() {
        let mut c = EventCounts::default();
        c.decision("cgroup:/a", false, "deny");
        c.decision("cgroup:/a", false, "deny");
        c.decision("cgroup:/a", true, "deny");
        c.failure(Some(0), 2);
        c.failure(None, 2);
        c.failure(Some(0), 2);
        assert_eq!(c.decisions[&("cgroup:/a".into(), "hard", "deny".into())], 2);
        assert_eq!(c.decisions[&("cgroup:/a".into(), "soft", "deny".into())], 1);
        assert_eq!(c.failures[&(Some(0), 2)], 2);
        assert_eq!(c.failures[&(None, 2)], 1);
    }
}
