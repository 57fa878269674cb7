//! The `held` record: a process the kernel stopped at exec in a pod the
//! agent had not seen, until the pod's rules were made (see gpumem-ebpf's
//! families/pods.rs); written when the agent lets it go on.
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{decode::Origin, enrich::container::Container, output::caller::Caller};

/// The `event` of a `held` record.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum HeldEvent {
    Held,
}

/// A process held at exec, let go on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeldLine {
    #[serde(flatten)]
    pub caller: Caller<HeldEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// The pod's cgroup, whose rules it waited for.
    pub pod_cgroup_id: u64,
    pub pod_cgroup: Option<Arc<str>>,
    /// How long it was held.
    pub held_ns: u64,
    /// false: it exited (or was killed) while held.
    pub resumed: bool,
}

impl HeldLine {
    pub fn new(
        o: &Origin,
        (cgroup, container): (Option<Arc<str>>, Option<Container>),
        (pod_cgroup_id, pod_cgroup): (u64, Option<Arc<str>>),
        (held_ns, resumed): (u64, bool),
    ) -> Self {
        let caller = Caller::new(o, HeldEvent::Held, "", cgroup);
        Self { caller, container, pod_cgroup_id, pod_cgroup, held_ns, resumed }
    }
}
