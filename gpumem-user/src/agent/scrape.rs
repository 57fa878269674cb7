//! The snapshot a metrics scrape encodes (`metrics::encode`).
use super::Agent;
use crate::metrics::scrape::Scrape;

impl Agent {
    /// What the agent knows now, for one scrape.
    pub fn scrape(&mut self) -> Scrape {
        Scrape {
            status: self.status(),
            limits: self.limits.list(),
            counts: self.counts.clone(),
            malformed: self.health.malformed_count(),
            probes: self.probes,
        }
    }
}
