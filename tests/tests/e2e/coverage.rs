//! Every allocation family, through the simulated driver: the agent's and
//! the kernel's totals equal the workload's truth exactly, per process,
//! per cgroup and per (kind, device); calls that are not charged are
//! reported; every charging symbol of the probe table is seen.
use std::collections::BTreeSet;

use gpumem::{
    bpf::probes::{probes, Shape},
    output::{EventLine, Line, RecordEvent},
};
use gpumem_tests::{harness::*, truth::Checkpoint};

fn check(agent: &Agent, cg: &Cgroup, c: &Checkpoint) -> Vec<Line> {
    let lines = agent.wait_for_checkpoint(c);
    let s = agent.status();
    assert_process_holds(&s, c.pid, c.held);
    assert_cgroup_holds(&s, cg, c.held);
    assert_eq!(split_of(&s, c.pid), c.split, "split by kind:device at checkpoint {}", c.checkpoint);
    lines
}

#[test]
fn every_family_is_accounted_exactly_by_kind_and_device() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    // Every kernel gpumem runs on here has BTF: calls in flight go to the
    // threads' task storage.
    assert!(!agent.stderr().contains(HASH_ONLY), "{}", agent.stderr());
    every_family(&agent, "families");
}

/// The same with every call in flight kept in the `PENDING` hash map and
/// the comm read through the helper, the fallback where a kernel has no
/// BTF (forced with `GPUMEM_TASK_CALLS=off`).
#[test]
fn every_family_is_accounted_exactly_with_calls_in_flight_in_the_hash_map() {
    if !privileged() {
        return;
    }
    let agent = Agent::start_with_env(&[("GPUMEM_TASK_CALLS", "off")], &[]);
    assert!(agent.stderr().contains(HASH_ONLY), "{}", agent.stderr());
    every_family(&agent, "families-hash");
}

/// What the agent says when calls in flight go to the hash map only.
const HASH_ONLY: &str = "calls in flight kept in a hash map only";

fn every_family(agent: &Agent, name: &str) {
    let cg = Cgroup::create(name);
    let mut w = Workload::spawn(&["--scenario", "families", "--pause"], Some(&cg), &[]);
    let pid = w.pid();

    let all = w.checkpoint();
    assert_eq!(all.checkpoint, "all");
    let lines = check(agent, &cg, &all);
    let mine = |event| lines.events(pid, event);
    // The thread's comm: read in place from the task, or (task storage
    // off, as where the kernel has no BTF) through the helper.
    let allocs = mine(RecordEvent::Alloc);
    assert!(!allocs.is_empty());
    for l in &allocs {
        assert_eq!(l.caller.comm, "gpumem-workload", "{l:?}");
    }
    sharing_is_reported(&lines, pid);
    let contexts = mine(RecordEvent::Context);
    let context_apis: BTreeSet<_> = contexts.iter().map(|l| l.caller.api.as_ref()).collect();
    assert!(
        context_apis.contains("cuDevicePrimaryCtxRetain") && context_apis.contains("cuCtxCreate_v4"),
        "{context_apis:?}"
    );
    let mapped = mine(RecordEvent::HostMapping);
    assert_eq!(mapped.len(), 1, "{mapped:?}");
    assert_eq!(
        (mapped[0].caller.api.as_ref(), mapped[0].kind.as_ref()),
        ("cuMemHostGetDevicePointer_v2", "host")
    );
    let v4 = contexts.iter().find(|l| l.caller.api == "cuCtxCreate_v4").unwrap();
    assert_eq!(v4.device, Some(1), "cuCtxCreate_v4's device argument is its fourth");
    w.resume();

    let freed = w.checkpoint();
    assert_eq!(freed.checkpoint, "freed");
    let lines = check(agent, &cg, &freed);
    let unmap_free = lines.events(pid, RecordEvent::Free).into_iter().find(|l| l.caller.api == "cuMemUnmap");
    assert_eq!(unmap_free.expect("the last unmap of a released handle frees it").size, 2 << 20);
    every_charging_row_was_seen(&lines, pid);
    w.resume();
    w.finish();
    let lines = agent.wait_for_exit(pid);
    // The created host pool's destruction is reported at its place.
    let destroyed: Vec<_> = lines
        .events(pid, RecordEvent::Pool)
        .into_iter()
        .filter(|l| l.caller.api == "cuMemPoolDestroy")
        .collect();
    assert!(destroyed.iter().any(|l| l.kind == "host"), "cuMemPoolDestroy of the host pool: {destroyed:?}");
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);
}

/// Every row of the probe table that charges or uncharges sent a record
/// for `pid` (the context setters, pool lookups and retains send none).
fn every_charging_row_was_seen(lines: &[Line], pid: u32) {
    let seen: BTreeSet<&str> = [
        RecordEvent::Alloc,
        RecordEvent::Free,
        RecordEvent::Pool,
        RecordEvent::Context,
        RecordEvent::Export,
        RecordEvent::Multicast,
    ]
    .into_iter()
    .flat_map(|e| lines.events(pid, e))
    .map(|l: &EventLine| l.caller.api.as_ref())
    .collect();
    // NVML's rows are another library's (the view suite's).
    for p in probes().filter(|p| p.api.library == gpumem::bpf::probes::Library::Cuda) {
        // Learning a pool's place, or retaining a VMM handle, sends
        // nothing: the split at each checkpoint shows them (the pools'
        // allocations' kinds and devices; memory a retained reference
        // holds past its unmap).
        let silent = matches!(
            p.api.shape,
            Shape::CtxSet
                | Shape::CtxPop
                | Shape::VmmMap
                | Shape::CallOut
                | Shape::PoolCreate
                | Shape::PoolOfLocation
                | Shape::PoolOfDevice
                | Shape::VmmRetain
                | Shape::MemInfo
                | Shape::TotalMem
        ) || matches!(p.symbol(), "cuCtxCreate" | "cuCtxCreate_v2" | "cuCtxCreate_v3")
            || p.symbol().starts_with("cuDevicePrimaryCtxRelease")
            || p.symbol() == "cuMemPoolDestroy";
        if !silent {
            assert!(seen.contains(p.symbol()), "no record for {} ({:?})", p.symbol(), p.api.shape);
        }
    }
}

/// Imports, exports and the multicast object are reported with their
/// handles and sizes, each a record of its own family.
fn sharing_is_reported(lines: &[Line], pid: u32) {
    let calls = |event| -> Vec<(String, u64, String)> {
        lines
            .events(pid, event)
            .iter()
            .map(|l| (l.caller.api.to_string(), l.size, l.addr.to_string()))
            .collect()
    };
    let apis = |event| calls(event).into_iter().map(|(api, ..)| api).collect::<BTreeSet<_>>();
    assert_eq!(
        apis(RecordEvent::Import),
        BTreeSet::from(["cuIpcOpenMemHandle_v2", "cuMemImportFromShareableHandle"].map(String::from))
    );
    assert_eq!(
        apis(RecordEvent::Export),
        BTreeSet::from(["cuIpcGetMemHandle", "cuMemExportToShareableHandle"].map(String::from))
    );
    let mc = calls(RecordEvent::Multicast);
    let seen: Vec<(&str, u64)> = mc.iter().map(|(api, size, _)| (api.as_str(), *size)).collect();
    let size = 2 << 20;
    assert_eq!(
        seen,
        [
            ("cuMulticastCreate", size),
            ("cuMulticastAddDevice", 0),
            ("cuMulticastBindMem", size),
            ("cuMulticastBindAddr", size),
            ("cuMulticastUnbind", size)
        ],
        "the size of each multicast call is the one it binds"
    );
    assert!(
        mc.iter().all(|(.., handle)| *handle == mc[0].2),
        "every call names the handle cuMulticastCreate wrote: {mc:?}"
    );
}
