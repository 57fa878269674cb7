//! Real CUDA frameworks from PyPI, unmodified, on the simulated driver:
//! numba-cuda (device, pinned, mapped and managed arrays, copies both
//! ways on two streams, host memory pinned in place, a second device,
//! `get_memory_info`, deferred frees) and cuda.core (the default, own and
//! pinned, managed and legacy-pinned memory resources, a virtual memory
//! resource freed through a retained handle, Buffer.copy_to). They run
//! the GPU kit's own workloads (`tests/gpukit/workloads`), which print
//! what they hold per memory kind and device; at every checkpoint
//! gpumem's split for the process, its cgroup's total and the simulated
//! card's own count per device equal that truth exactly.
use std::{collections::BTreeMap, process::Command};

use gpumem_tests::harness::*;
use serde::Deserialize;

/// A kit workload's checkpoint line (workloads/checkpoint.py).
#[derive(Debug, Deserialize)]
struct KitLine {
    checkpoint: String,
    pid: u32,
    framework: BTreeMap<String, u64>,
    split: BTreeMap<String, u64>,
}

/// The card's devices' capacity in these tests.
const CAPACITY: u64 = 4 << 30;

#[test]
fn numba_cuda_is_traced_exactly() {
    let Some(seen) =
        traced_exactly("numba_alloc.py", &["allocated", "pinned in place", "device arrays freed"])
    else {
        return;
    };
    for line in &seen {
        // get_memory_info: the card as the driver reports it, device 0's
        // free figure = capacity - what the card counts there (the
        // process's memory and its context: it is alone on its card).
        assert_eq!(line.framework["total"], CAPACITY, "{line:?}");
        let on_card = line.split.get("device:0").copied().unwrap_or(0) + CONTEXT_COST;
        assert_eq!(line.framework["free"], CAPACITY - on_card, "{line:?}");
    }
    assert!(seen[0].split.contains_key("device:1"), "the second device's arrays: {:?}", seen[0]);
}

#[test]
fn cuda_core_is_traced_exactly() {
    let Some(seen) = traced_exactly("cuda_core_alloc.py", &["allocated", "closed"]) else {
        return;
    };
    let kinds: Vec<&str> = seen[0].split.keys().map(String::as_str).collect();
    assert_eq!(kinds, ["device:0", "device:1", "host:0", "managed:0", "vmm:0"], "every resource allocated");
    // cuda.core 1.2 never releases cuMemCreate's reference
    // (NVIDIA/cuda-python#2882): the driver, and gpumem with it, keeps the
    // closed VirtualMemoryResource buffer's memory until exit.
    assert_eq!(seen[1].split, BTreeMap::from([("vmm:0".to_string(), seen[0].split["vmm:0"])]));
}

/// Runs a kit workload in a cgroup of its own on a card of its own and
/// checks every checkpoint; returns the checkpoints, or None where the
/// test cannot run here (it has said why).
fn traced_exactly(script: &str, checkpoints: &[&str]) -> Option<Vec<KitLine>> {
    if !privileged() {
        return None;
    }
    let python = provided(
        "GPUMEM_PYTHON",
        "sets it to the venv with numba-cuda and cuda.core that `cargo xtask setup` makes",
    )?;
    let p = paths();
    let card = SimCard::new(CAPACITY);
    let agent = Agent::start_on(&card, &[]);
    let cg = Cgroup::create(script.trim_end_matches(".py"));
    let mut cmd = Command::new(python);
    cmd.arg(p.root.join("tests/gpukit/workloads").join(script))
        .env("LD_LIBRARY_PATH", p.libcuda.parent().unwrap())
        .envs(card.env());
    let mut w = Workload::from_command(cmd, Some(&cg));
    let pid = w.pid();
    let mut seen = vec![];
    for &name in checkpoints {
        let line: KitLine = w.line();
        assert_eq!((line.checkpoint.as_str(), line.pid), (name, pid), "{line:?}");
        let s = agent.wait_for_status(&format!("{script} at {name}: split = {:?}", line.split), |s| {
            split_of(s, pid) == line.split
        });
        assert_process_holds(&s, pid, line.split.values().sum());
        assert_cgroup_holds(&s, &cg, line.split.values().sum());
        assert_every_call_whole(&s);
        for dev in 0..2 {
            // The card counts device memory (device, VMM) as it is
            // allocated; managed memory only where it is touched on the
            // device (never, here), pinned host memory not at all.
            let on_card: u64 =
                ["device", "vmm"].iter().filter_map(|k| line.split.get(&format!("{k}:{dev}"))).sum();
            assert_eq!(card.held(pid, dev).0, on_card, "the card's own count on device {dev} at {name}");
        }
        seen.push(line);
        w.resume();
    }
    w.finish();
    agent.wait_for_exit(pid);
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);
    Some(seen)
}
