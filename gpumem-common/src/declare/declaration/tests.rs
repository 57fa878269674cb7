use super::{flag, Declaration, Defaults};
use crate::declare::declared::Declared;
use crate::{
    declare::{hami, mib, names::source, rule, rule::error},
    maps::{limit_action, limit_view, DEVICE_ANY},
};

const KILL: Defaults =
    Defaults { action: limit_action::SIGNAL, signal: 9, can_deny: false, view_ok: false, cap: 0 };

fn declare(vars: &[(&str, &str)], d: &Defaults) -> Declaration {
    let mut decl = Declaration::default();
    for (name, value) in vars {
        let v = value.as_bytes();
        match *name {
            "GPUMEM_LIMIT" => decl.add_rule(rule::parse(v), d),
            "CUDA_DEVICE_MEMORY_LIMIT" => decl.add_hami(None, hami::parse(v)),
            "NVIDIA_GPU_MEMORY_LIMIT" => decl.add_mib(source::NVIDIA, mib::parse(v)),
            "GPU_MEMORY_LIMIT" => decl.add_mib(source::KAI, mib::parse(v)),
            n => {
                let i = n.strip_prefix("CUDA_DEVICE_MEMORY_LIMIT_").unwrap().parse().unwrap();
                decl.add_hami(Some(i), hami::parse(v))
            }
        }
    }
    decl.finish(d);
    decl
}

#[test]
fn a_rule_takes_the_default_action_and_view() {
    let d = declare(&[("GPUMEM_LIMIT", "64MiB")], &KILL);
    assert!(d.in_force());
    let t = d.total;
    assert_eq!(
        (t.hard, t.action, t.signal, t.device, t.view),
        (64 << 20, limit_action::SIGNAL, 9, DEVICE_ANY, limit_view::DRIVER)
    );
    let d = declare(&[("GPUMEM_LIMIT", "1G,action=audit,device=1")], &Defaults { view_ok: true, ..KILL });
    assert_eq!((d.total.action, d.total.device, d.total.view), (limit_action::AUDIT, 1, limit_view::LIMIT));
    assert_eq!(d.each_set, 0);
}

#[test]
fn deny_where_the_kernel_cannot_takes_the_fallback_or_is_refused() {
    let d = declare(&[("GPUMEM_LIMIT", "1G,action=deny,fallback=signal:TERM")], &KILL);
    assert_eq!((d.total.action, d.total.signal), (limit_action::SIGNAL, 15));
    let d = declare(&[("GPUMEM_LIMIT", "1G,action=deny")], &KILL);
    assert!(!d.in_force());
    assert_eq!((d.failed, d.error.code), (source::bit(source::GPUMEM), error::DENY_UNSUPPORTED));
    let d = declare(&[("GPUMEM_LIMIT", "1G,action=deny")], &Defaults { can_deny: true, ..KILL });
    assert_eq!(d.total.action, limit_action::DENY);
    let d = declare(&[("GPUMEM_LIMIT", "1G,view=limit")], &KILL);
    assert_eq!(d.error.code, error::VIEW_UNSUPPORTED);
    let d = declare(&[("GPUMEM_LIMIT", "1G,colour=red")], &KILL);
    assert_eq!(d.error.code, error::UNKNOWN_KEY);
}

#[test]
fn hami_limits_each_device_its_own_over_the_plain_one() {
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT", "64m"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "32m")], &KILL);
    assert_eq!((d.each[0], d.each[1], d.each[15]), (64 << 20, 32 << 20, 64 << 20));
    assert_eq!(d.each_set, 0xffff);
    // `_i` at 0 (HAMi: none) leaves the plain one.
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT", "64m"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "0")], &KILL);
    assert_eq!(d.each[1], 64 << 20);
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT_1", "32m")], &KILL);
    assert_eq!((d.each_set, d.each[1]), (0b10, 32 << 20));
    // Nothing HAMi reads as a limit: found, nothing in force, nothing failed.
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT", "abc")], &KILL);
    assert_eq!((d.found, d.failed, d.in_force()), (source::bit(source::HAMI), 0, false));
}

#[test]
fn the_smallest_declaration_holds_and_the_cap_clamps() {
    let vars =
        [("CUDA_DEVICE_MEMORY_LIMIT", "64m"), ("NVIDIA_GPU_MEMORY_LIMIT", "48"), ("GPU_MEMORY_LIMIT", "100")];
    assert_eq!(declare(&vars, &KILL).each[3], 48 << 20);
    assert_eq!(declare(&vars, &KILL).device_source(3), Some(source::NVIDIA));
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT", "64m"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "32m")], &KILL);
    assert_eq!(
        (d.device_source(0), d.device_source(1), d.device_source(16)),
        (Some(source::HAMI), Some(source::HAMI_DEVICE), None)
    );
    let d = declare(&vars, &Defaults { cap: 50 << 20, ..KILL });
    assert_eq!(d.each[3], 48 << 20);
    assert_eq!(d.clamped, source::bit(source::HAMI) | source::bit(source::KAI));
    let d = declare(&[("GPUMEM_LIMIT", "1GiB,soft=900MiB")], &Defaults { cap: 128 << 20, ..KILL });
    assert_eq!((d.total.hard, d.total.soft, d.flags), (128 << 20, 0, flag::SOFT_DROPPED));
    // NVIDIA's 0 is a limit of nothing at all.
    let d = declare(&[("NVIDIA_GPU_MEMORY_LIMIT", "0")], &KILL);
    assert_eq!((d.each_set, d.each[0], d.in_force()), (0xffff, 0, true));
    let d = declare(&[("NVIDIA_GPU_MEMORY_LIMIT", "1G")], &KILL);
    assert_eq!((d.failed, d.nvidia_error, d.in_force()), (source::bit(source::NVIDIA), 1, false));
}

#[test]
fn device_limits_need_an_action_the_kernel_has() {
    let deny = Defaults { action: limit_action::DENY, signal: 0, ..KILL };
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT", "64m")], &deny);
    assert_eq!((d.each_error, d.in_force()), (error::DENY_UNSUPPORTED, false));
    assert_eq!(Declared::new(&d, 0).each_set, 0);
    let d = declare(&[("CUDA_DEVICE_MEMORY_LIMIT", "64m")], &Defaults { can_deny: true, ..deny });
    let kept = Declared::new(&d, 7);
    let r = kept.device_rule(2).unwrap();
    assert_eq!((r.hard, r.action, r.device, kept.exec_sp), (64 << 20, limit_action::DENY, 2, 7));
    assert_eq!(kept.device_rule(16), None);
}
