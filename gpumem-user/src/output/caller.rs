//! Who made a call: the fields every line from a kernel record starts with.
use std::{borrow::Cow, sync::Arc};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::decode::Origin;

/// Who made a call: the fields every kernel-sourced line starts with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Caller<E> {
    pub ts_ns: u64,
    pub event: E,
    pub api: Cow<'static, str>,
    pub pid: u32,
    pub tid: u32,
    pub comm: CompactString,
    pub cgroup_id: u64,
    /// The cgroup's path, shared with the agent's table of paths.
    pub cgroup: Option<Arc<str>>,
}

impl<E> Caller<E> {
    pub fn new(o: &Origin, event: E, api: &'static str, cgroup: Option<Arc<str>>) -> Self {
        Self {
            ts_ns: o.ts_ns,
            event,
            api: Cow::Borrowed(api),
            pid: o.pid,
            tid: o.tid,
            comm: o.comm.clone(),
            cgroup_id: o.cgroup_id,
            cgroup,
        }
    }
}
