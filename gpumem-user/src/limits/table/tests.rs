//! The limit table's pure decisions: the action and the view a limit
//! gets on this kernel, and which kinds of target are in force.
use super::*;
use crate::limits::policy::View;

#[test]
fn deny_needs_a_kernel_or_a_fallback() {
    let deny = Limit::parse("pid:1=1G,action=deny").unwrap();
    let err =
        effective_action(&deny, Action::Audit, Some("invalid bpf_context access")).unwrap_err().to_string();
    assert!(err.contains("write registers") && err.contains("fallback=signal:SIGTERM"), "{err}");
    let with_fallback = Limit::parse("pid:1=1G,action=deny,fallback=signal:SIGTERM").unwrap();
    assert_eq!(effective_action(&with_fallback, Action::Audit, Some("no")).unwrap(), Action::Signal(15));
    let plain = Limit::parse("pid:1=1G").unwrap();
    assert_eq!(effective_action(&plain, Action::Audit, None).unwrap(), Action::Audit);
    // Where the kernel can, deny is deny, fallback or not.
    assert_eq!(effective_action(&deny, Action::Audit, None).unwrap(), Action::Deny);
    assert_eq!(effective_action(&with_fallback, Action::Audit, None).unwrap(), Action::Deny);
}

#[test]
fn in_force_names_each_kind_of_target_once() {
    let t = |s: &str| Limit::parse(s).unwrap().target;
    let (pid, cg, comm) = (t("pid:7=1G"), t("cgroup:/a=1G"), t("comm:python=1G"));
    assert_eq!(in_force_mask([].into_iter()), 0);
    assert_eq!(in_force_mask([&cg, &cg].into_iter()), limits_in_force::CGROUP);
    assert_eq!(in_force_mask([&pid].into_iter()), limits_in_force::PROCESS);
    assert_eq!(in_force_mask([&comm, &pid].into_iter()), limits_in_force::COMM | limits_in_force::PROCESS);
    assert_eq!(in_force_mask([&comm, &pid, &cg].into_iter()), 7);
}

#[test]
fn view_limit_needs_a_kernel_and_is_the_default_where_there_is_one() {
    let plain = Limit::parse("pid:1=1G").unwrap();
    assert_eq!(effective_view(&plain, None).unwrap(), View::Limit);
    assert_eq!(effective_view(&plain, Some("lockdown")).unwrap(), View::Driver);
    let asked = Limit::parse("pid:1=1G,view=limit").unwrap();
    let err = effective_view(&asked, Some("lockdown: integrity")).unwrap_err().to_string();
    assert!(err.contains("write user memory") && err.contains("lockdown: integrity"), "{err}");
    assert!(err.contains("view=driver"), "says what to do: {err}");
    assert_eq!(effective_view(&asked, None).unwrap(), View::Limit);
    let driver = Limit::parse("pid:1=1G,view=driver").unwrap();
    assert_eq!(effective_view(&driver, None).unwrap(), View::Driver);
    assert_eq!(effective_view(&driver, Some("no")).unwrap(), View::Driver);
}
