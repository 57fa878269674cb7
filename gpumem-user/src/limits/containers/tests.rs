use gpumem_common::declare::{
    declaration::{Declaration, Defaults},
    read::read_environment,
};

use super::*;
use crate::limits::policy::Action;

fn declare(vars: &[&str]) -> Declaration {
    let d = Defaults { action: gpumem_common::limit_action::SIGNAL, signal: 9, ..Defaults::default() };
    read_environment(vars.iter().map(|v| v.as_bytes()), gpumem_common::declare::names::honour::ALL, &d)
}

#[test]
fn the_smaller_holds_device_by_device() {
    let mut c = Declared::default();
    assert_eq!(c.merge(10, &declare(&["GPUMEM_LIMIT=1GiB", "CUDA_DEVICE_MEMORY_LIMIT_1=32m"])), Outcome::Set);
    assert_eq!(c.merge(11, &declare(&["GPUMEM_LIMIT=2GiB"])), Outcome::Kept);
    assert_eq!(c.merge(12, &declare(&["GPUMEM_LIMIT=512MiB"])), Outcome::Tightened);
    assert_eq!(c.merge(13, &declare(&["CUDA_DEVICE_MEMORY_LIMIT=16m"])), Outcome::Tightened);
    let rules = c.rules("/machine.slice/libpod-x.scope");
    assert_eq!(rules.len(), 2);
    let (total, none) = &rules[0];
    assert_eq!(
        (total.hard, total.action, total.device, none),
        (512 << 20, Some(Action::Signal(9)), None, &None)
    );
    let (each, per_device) = &rules[1];
    let per_device = per_device.as_ref().unwrap();
    assert_eq!(
        (per_device[0], per_device[1], per_device[15]),
        (Some(16 << 20), Some(16 << 20), Some(16 << 20))
    );
    assert_eq!(each.hard, 16 << 20);
    assert_eq!(
        c.sources("4f1a2b3c4d5e"),
        [
            "env GPUMEM_LIMIT of pid 12 in container 4f1a2b3c4d5e",
            "env CUDA_DEVICE_MEMORY_LIMIT of pid 13 in container 4f1a2b3c4d5e"
        ]
    );
}

#[test]
fn a_declaration_with_nothing_in_force_sets_nothing() {
    let mut c = Declared::default();
    assert_eq!(c.merge(10, &declare(&["GPUMEM_LIMIT=8GiB,colour=red"])), Outcome::Set);
    assert!(c.rules("/a").is_empty());
}

#[test]
fn a_containers_cgroup_ends_at_the_segment_that_names_it() {
    let id = "4f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";
    let scope = format!("/machine.slice/libpod-{id}.scope");
    assert_eq!(container_cgroup(&scope, id), Some(scope.clone()));
    assert_eq!(container_cgroup(&format!("{scope}/container"), id), Some(scope.clone()));
    assert_eq!(container_cgroup("/user.slice", id), None);
}
