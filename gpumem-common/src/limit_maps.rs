//! The limit maps' keys and values: the kinds of target, the kinds in
//! force, actions and views, a slot's rule and count (`LIMITS`,
//! `LIMIT_STATE`), a target's rules (`LIMIT_INDEX`, `COMM_LIMITS`) and each
//! cgroup's kept walk of its ancestors' rules (`CGROUP_LIMITS`).

/// Kinds of limit target in [`LimitKey`].
pub mod limit_scope {
    pub const PROCESS: u32 = 1;
    pub const CGROUP: u32 = 2;
}

/// `LIMITS_IN_FORCE[0]`: the kinds of target some rule in force has, so a
/// call looks up only where a rule can be (no rule: 0, and the limit path
/// is skipped whole). `LIMITS_IN_FORCE[1]`, written by the kernel, is 1
/// once a process declared a limit ([`DECLARED`](limits_in_force::DECLARED)).
pub mod limits_in_force {
    pub const PROCESS: u32 = 1;
    pub const CGROUP: u32 = 2;
    pub const COMM: u32 = 4;
    /// Some process declared limits in its environment (`DECLARED`).
    pub const DECLARED: u32 = 8;
}

/// What a limit does to a call that would cross it.
pub mod limit_action {
    pub const AUDIT: u32 = 1;
    pub const SIGNAL: u32 = 2;
    pub const DENY: u32 = 3;
}

/// `LimitRule::device` when every device counts.
pub const DEVICE_ANY: u32 = u32::MAX;

/// `LimitRule::device` of a rule that limits each device on its own: its
/// slot heads `span` slots after it, one a device (device `d`'s rule in
/// slot + 1 + d), where the calls on that device count. The kernel never
/// reads the head: a target's rules for device `d` (`TargetRules::on`)
/// name device `d`'s slot.
pub const DEVICE_EACH: u32 = u32::MAX - 1;

/// How many devices a target's rules are kept apart for: a call on device
/// `d` reads `on[d % INDEX_DEVICES]`, and a rule for one device (which the
/// kernel checks) is kept where its device reads.
pub const INDEX_DEVICES: usize = 16;

/// A target's rules (`LIMIT_INDEX`, `COMM_LIMITS`): written by the agent,
/// one run of slots a rule.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetRules {
    /// Each rule's first slot (`limit_list::rules`), the agent's record
    /// (read back by its successor).
    pub heads: u64,
    /// What a call on each device pushes (`limit_list::rules`): the slot
    /// that counts that device's memory of each rule that does.
    pub on: [u64; INDEX_DEVICES],
}

/// A cgroup and a device entry (`d % INDEX_DEVICES`): the key of the
/// limits a call there pushes from the cgroup and its ancestors.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CgroupDevice {
    pub cgroup_id: u64,
    pub device: u32,
    pub _pad: u32,
}

/// What a walk of a cgroup's ancestors in `LIMIT_INDEX` pushed for a
/// device (a `limit_list`), and the index's generation it was walked in:
/// the kernel's, valid while the agent has not changed the index since
/// (`LIMIT_INDEX_GENERATION`). A cgroup's ancestors never change. The key
/// is kept in the value too: a value read as its LRU element is reused
/// for another key is taken for nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupLimits {
    pub generation: u64,
    pub list: u64,
    pub key: CgroupDevice,
}

/// Which limit applies to a process (by tgid) or a cgroup (by id).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LimitKey {
    pub scope: u32,
    pub _pad: u32,
    pub id: u64,
}

/// One limit slot's rule: written by the agent only (at start-up and when
/// limits change at run time), read by the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct LimitRule {
    pub hard: u64,
    /// 0: no soft limit.
    pub soft: u64,
    /// One of [`limit_action`].
    pub action: u32,
    pub signal: u32,
    /// Only this device's memory counts, or [`DEVICE_ANY`].
    pub device: u32,
    /// 1 while the rule is in force.
    pub active: u32,
    /// One of [`limit_view`]: what a process under this limit is told the
    /// card has (`cuMemGetInfo`, `cuDeviceTotalMem`).
    pub view: u32,
    /// A [`DEVICE_EACH`] rule: how many devices' slots follow it.
    pub span: u32,
}

/// What a limit tells the processes under it about the card.
pub mod limit_view {
    /// The card as the driver reports it.
    pub const DRIVER: u32 = 0;
    /// The limit as the card's size, and what is left under it as free.
    pub const LIMIT: u32 = 1;

    /// A view's name, as `view=` writes it.
    pub const fn name(view: u32) -> &'static str {
        if view == LIMIT {
            "limit"
        } else {
            "driver"
        }
    }
}

/// One limit slot's count: written by the kernel only, so the agent can
/// rewrite the rule while calls are counted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitState {
    /// Bytes charged (or reserved by calls in flight) under this limit.
    pub usage: u64,
    /// 1 while usage is above the soft limit (one record per crossing).
    pub soft_over: u64,
}
