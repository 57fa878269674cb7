//! A rule as the table holds it: the operator's limit or a declaration's,
//! resolved for this kernel, with its slot.
use crate::limits::policy::{Action, Limit, View};

/// A rule as the kernel applies it, with what the records call it.
#[derive(Debug, Clone)]
pub struct Installed {
    /// Its (first) slot.
    pub slot: u32,
    pub limit: Limit,
    pub action: Action,
    /// What the processes under it are told the card has.
    pub view: View,
    /// A rule that limits each device on its own: each device's hard
    /// limit (None: that device is not limited), in the slots after
    /// `slot`; `limit.device` is None and `limit.hard` the largest.
    pub each: Option<Vec<Option<u64>>>,
    /// Who made it.
    pub origin: Origin,
}

/// Who made a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The operator's policy: the file, `--limit`, `gpumem limit set`.
    Operator,
    /// The operator's rule on pods, made on one pod's cgroup
    /// (`namespace:team-a, pod team-a/trainer-0`).
    Pod(String),
    /// A container's declaration (`env GPUMEM_LIMIT of pid 4242 in
    /// container 4f1a2b3c4d5e`).
    Declared(String),
}

impl Origin {
    /// What the records and `limit list` say it came from (nothing for
    /// the operator's own rules).
    pub fn label(&self) -> Option<String> {
        match self {
            Origin::Operator => None,
            Origin::Pod(s) | Origin::Declared(s) => Some(s.clone()),
        }
    }
}

/// Which devices a rule counts: what tells a target's rules apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Devices {
    All,
    One(u32),
    Each,
}

impl Installed {
    /// `limit` in `slot` with its own action and view (or audit, driver).
    pub fn new(slot: u32, limit: Limit, each: Option<Vec<Option<u64>>>) -> Self {
        let (action, view) = (limit.action.unwrap_or(Action::Audit), limit.view.unwrap_or(View::Driver));
        Self { slot, limit, action, view, each, origin: Origin::Operator }
    }

    /// The device slots after the first.
    pub fn span(&self) -> u32 {
        self.each.as_ref().map_or(0, |e| e.len() as u32)
    }

    pub fn devices(&self) -> Devices {
        match (&self.each, self.limit.device) {
            (Some(_), _) => Devices::Each,
            (None, Some(d)) => Devices::One(d),
            (None, None) => Devices::All,
        }
    }
}
