//! A rule as the kernel's `LIMITS` array holds it: one slot, or (one
//! limit per device) a head marked `DEVICE_EACH` and a slot a device.
use gpumem_common::{limit_action, limit_view, LimitRule, DEVICE_ANY, DEVICE_EACH};

use super::installed::Installed;
use crate::limits::policy::{Action, View};

/// The kernel's rule for each of `rule`'s slots: one, or (one limit per
/// device) a head marked `DEVICE_EACH` then each device's.
pub fn kernel_rules(rule: &Installed, active: bool) -> Vec<LimitRule> {
    let (code, signal) = match rule.action {
        Action::Audit => (limit_action::AUDIT, 0),
        Action::Signal(s) => (limit_action::SIGNAL, s as u32),
        Action::Deny => (limit_action::DENY, 0),
    };
    let view = match rule.view {
        View::Limit => limit_view::LIMIT,
        View::Driver => limit_view::DRIVER,
    };
    let l = &rule.limit;
    let one = LimitRule {
        hard: l.hard,
        soft: l.soft.unwrap_or(0),
        action: code,
        signal,
        device: l.device.unwrap_or(DEVICE_ANY),
        active: active as u32,
        view,
        span: 0,
    };
    let Some(each) = &rule.each else { return vec![one] };
    let head = LimitRule { hard: 0, soft: 0, device: DEVICE_EACH, span: each.len() as u32, ..one };
    let devices = each.iter().enumerate().map(|(d, hard)| LimitRule {
        hard: hard.unwrap_or(0),
        soft: 0,
        device: d as u32,
        active: u32::from(active && hard.is_some()),
        ..one
    });
    std::iter::once(head).chain(devices).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::policy::Limit;

    #[test]
    fn a_rule_per_device_is_a_head_and_a_slot_a_device() {
        let mut rule =
            Installed::new(7, Limit::parse("cgroup:/a=64MiB,action=signal:SIGTERM").unwrap(), None);
        let one = kernel_rules(&rule, true);
        assert_eq!((one.len(), one[0].hard, one[0].device, one[0].signal), (1, 64 << 20, DEVICE_ANY, 15));
        rule.each = Some(vec![Some(32 << 20), None, Some(8 << 20)]);
        let each = kernel_rules(&rule, true);
        let got: Vec<(u64, u32, u32, u32)> =
            each.iter().map(|r| (r.hard, r.device, r.active, r.span)).collect();
        assert_eq!(got, [(0, DEVICE_EACH, 1, 3), (32 << 20, 0, 1, 0), (0, 1, 0, 0), (8 << 20, 2, 1, 0)]);
        assert!(kernel_rules(&rule, false).iter().all(|r| r.active == 0));
    }
}
