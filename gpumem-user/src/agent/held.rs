//! Processes the kernel held at exec until their pod's rules were made
//! (`limits/pod_hold.rs`): a `held` record for each one let go on.
use std::{io, sync::Arc};

use super::{held_now, Agent};
use crate::{
    decode::Origin,
    limits::Released,
    output::{held::HeldLine, Line},
};

impl Agent {
    /// A `held` record read: the pod's rules made where they can be, and
    /// whoever's pod is seen goes on.
    pub(super) fn on_held(&mut self, origin: &Origin, pod: u64) -> io::Result<()> {
        let (kernel, ledger) = (&self.kernel, &self.ledger);
        let released = self.limits.pod_held(origin.clone(), pod, &|| held_now(kernel, ledger));
        self.say_released(released)
    }

    /// The pods looked at again (the health step, and start-up).
    pub(super) fn pods_step(&mut self) -> io::Result<()> {
        let (kernel, ledger) = (&self.kernel, &self.ledger);
        let released = self.limits.pods_step(&|| held_now(kernel, ledger));
        self.say_released(released)
    }

    /// The agent stops: no process is held from now, and those held go on.
    pub fn stop_holding(&mut self) -> io::Result<()> {
        let released = self.limits.stop_holding();
        self.say_released(released)
    }

    fn say_released(&mut self, released: Vec<Released>) -> io::Result<()> {
        for r in released {
            let (pod_cgroup, _) = self.enricher.cgroup(r.pod_cgroup_id);
            let (cgroup, container) = self.enricher.cgroup(r.origin.cgroup_id);
            let at = (cgroup, container.map(Arc::unwrap_or_clone));
            let line = HeldLine::new(&r.origin, at, (r.pod_cgroup_id, pod_cgroup), (r.held_ns, r.resumed));
            tracing::info!(
                "pid {} ({}) was held {:.1} ms at exec for its pod's rules; {}",
                r.origin.pid,
                r.origin.comm,
                r.held_ns as f64 / 1e6,
                if r.resumed { "it goes on" } else { "it was gone" }
            );
            self.sink.write(&Line::Held(line))?;
        }
        Ok(())
    }
}
