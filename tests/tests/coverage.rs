//! Every allocation family, through the simulated driver: the agent's and
//! the kernel's totals equal the workload's truth exactly, per process,
//! per cgroup and per (kind, device); calls that are not charged are
//! reported; every charging symbol of the probe table is seen.
use std::collections::BTreeSet;

use gpumem::bpf::probes::{Family, PROBES};
use gpumem_tests::{harness::*, truth::Checkpoint};
use serde_json::Value;

fn check(agent: &Agent, cg: &Cgroup, c: &Checkpoint) -> Vec<Value> {
    let lines = agent.wait_for_checkpoint(c);
    let s = agent.status();
    assert_process_holds(&s, c.pid, c.held);
    assert_cgroup_holds(&s, cg, c.held);
    assert_eq!(split_of(&s, c.pid), c.split, "split by kind:device at checkpoint {}", c.checkpoint);
    lines
}

#[test]
fn every_family_is_accounted_exactly_by_kind_and_device() {
    if !privileged("every_family_is_accounted_exactly_by_kind_and_device") {
        return;
    }
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("families");
    let mut w = Workload::spawn(&["--scenario", "families", "--pause"], Some(&cg), &[]);
    let pid = w.pid();

    let all = w.checkpoint();
    assert_eq!(all.checkpoint, "all");
    let lines = check(&agent, &cg, &all);
    let mine = |event: &str| -> Vec<&Value> {
        lines.iter().filter(|l| l["pid"] == pid && l["event"] == event).collect()
    };
    let imports = mine("import");
    let import_apis: BTreeSet<_> = imports.iter().map(|l| l["api"].as_str().unwrap()).collect();
    assert_eq!(import_apis, BTreeSet::from(["cuIpcOpenMemHandle_v2", "cuMemImportFromShareableHandle"]));
    let contexts: BTreeSet<_> =
        mine("context").iter().map(|l| l["api"].as_str().unwrap().to_string()).collect();
    assert!(
        contexts.contains("cuDevicePrimaryCtxRetain") && contexts.contains("cuCtxCreate_v4"),
        "{contexts:?}"
    );
    let v4 = mine("context").into_iter().find(|l| l["api"] == "cuCtxCreate_v4").unwrap().clone();
    assert_eq!(v4["device"], 1, "cuCtxCreate_v4's device argument is its fourth");
    w.resume();

    let freed = w.checkpoint();
    assert_eq!(freed.checkpoint, "freed");
    let lines = check(&agent, &cg, &freed);
    let unmap_free =
        lines.iter().find(|l| l["pid"] == pid && l["event"] == "free" && l["api"] == "cuMemUnmap");
    assert_eq!(unmap_free.expect("the last unmap of a released handle frees it")["size"], 2 << 20);
    let seen: BTreeSet<&str> = lines
        .iter()
        .filter(|l| {
            l["pid"] == pid && matches!(l["event"].as_str(), Some("alloc" | "free" | "pool" | "context"))
        })
        .filter_map(|l| l["api"].as_str())
        .collect();
    // Every row that charges or uncharges was exercised (the context
    // setters produce no records of their own).
    for p in PROBES {
        let silent = matches!(p.family, Family::CtxSet | Family::CtxPop | Family::VmmMap | Family::CallOut)
            || matches!(p.symbol, "cuCtxCreate" | "cuCtxCreate_v2" | "cuCtxCreate_v3")
            || p.symbol.starts_with("cuDevicePrimaryCtxRelease")
            || p.symbol == "cuMemPoolDestroy";
        if !silent {
            assert!(seen.contains(p.symbol), "no record for {} ({:?})", p.symbol, p.family);
        }
    }
    w.resume();
    w.finish();
    let lines = agent.wait_for("the exit record", |l| count(l, pid, "exit") == 1);
    assert!(lines.iter().any(|l| l["pid"] == pid && l["event"] == "pool" && l["api"] == "cuMemPoolDestroy"));
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);
}
