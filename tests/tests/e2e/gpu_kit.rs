//! The GPU kit (`tests/gpukit`, what `cargo xtask gpu-kit` bundles) run as
//! shipped, on the simulated driver: its run.sh starts the agent, runs
//! the cuda-bindings workload over every allocation family, and writes a
//! report whose every figure matches the workload's truth and the
//! simulated card's own count. The frameworks (PyTorch, JAX, CuPy,
//! numba-cuda, cuda.core) need a real GPU: the README holds the report of
//! a run on one.
use std::{path::Path, process::Command};

use gpumem_tests::harness::*;
use serde_json::Value;

#[test]
fn the_gpu_kits_report_matches_the_simulated_driver_exactly() {
    if !privileged() {
        return;
    }
    let Some(python) = provided("GPUMEM_PYTHON", "sets it to the venv with cuda-bindings") else {
        return;
    };
    let p = paths();
    let dir = scratch();
    let kit = dir.path().join("kit");
    copy_tree(&p.root.join("tests/gpukit"), &kit);
    std::os::unix::fs::symlink(&p.agent, kit.join("gpumem")).expect("linking the agent into the kit");
    let card = SimCard::new(1 << 30);
    let out = dir.path().join("out");
    let run = Command::new(kit.join("run.sh"))
        .arg(&out)
        .env("PYTHON", &python)
        .env("GPUKIT_LIBCUDA", &p.libcuda)
        .env("GPUKIT_ONLY", "cuda-bindings")
        .env("LD_LIBRARY_PATH", p.libcuda.parent().unwrap())
        .envs(card.env())
        .output()
        .expect("running the kit's run.sh");
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "run.sh failed ({}):\n{said}", run.status);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let scenarios = report["scenarios"].as_array().unwrap();
    let names: Vec<&str> = scenarios.iter().map(|s| s["scenario"].as_str().unwrap()).collect();
    assert_eq!(names, ["cuda-bindings", "cuda-bindings per-thread streams"], "{said}");
    for s in scenarios {
        check_scenario(s, &said);
    }
    let md = std::fs::read_to_string(out.join("report.md")).expect("run.sh writes report.md");
    assert!(md.contains("| cuda-bindings | allocated | device_bytes 18,953,219"), "report.md:\n{md}");
    assert!(!md.contains("**no**"), "report.md marks a mismatch:\n{md}");
    // What tracing costs, both loops at each stage (before, traced, after).
    for lp in ["cuMemAlloc_v2 + cuMemFree_v2", "cuMemAllocAsync + cuMemFreeAsync"] {
        let section = md.split(lp).nth(1).unwrap_or_else(|| panic!("report.md has no {lp} loop:\n{md}"));
        let stages = ["- untraced: ", "- traced: ", "- untraced after: "];
        assert!(stages.iter().all(|s| section.contains(s)), "{lp}: {section}\n{said}");
    }
    // The time inside the programs that run every pair of each loop, one
    // run each a pair (cuMemFree_v2 has no return probe).
    for (lp, programs) in [
        ("plain", &["alloc_entry", "alloc_return", "free_entry"][..]),
        ("pool", &["alloc_entry", "alloc_return", "free_take_entry", "free_return"][..]),
    ] {
        for p in programs {
            let row = format!("| {lp} | {p} | 1.00 | ");
            assert!(md.contains(&row), "report.md has no row `{row}`:\n{md}");
        }
        assert!(md.contains(&format!("| {lp} | all, per pair | | | ")), "report.md:\n{md}");
    }
    // The training step runs with each allocator at each stage; without
    // PyTorch (the project's venv has none) the report says so.
    let steps = std::fs::read_to_string(out.join("steps.jsonl")).expect("run.sh writes steps.jsonl");
    assert_eq!(steps.lines().count(), 6, "two allocators at three stages:\n{steps}\n{said}");
    for allocator in ["native", "cudaMallocAsync"] {
        let row = format!("| {allocator} | not run: no PyTorch");
        assert!(md.contains(&row), "report.md has no row `{row}`:\n{md}");
    }
}

/// Every checkpoint of one scenario: gpumem equal to the truth per kind,
/// NVML (the simulated card) = gpumem + the context, nothing refused,
/// everything released at exit.
fn check_scenario(s: &Value, said: &str) {
    let name = &s["scenario"];
    assert_eq!(s["exit"], 0, "{name} exited badly:\n{said}");
    assert_eq!(s["notes"], Value::Array(vec![]), "{name}: a family was refused or a call failed:\n{said}");
    let rows = s["rows"].as_array().unwrap();
    let checkpoints: Vec<&str> = rows.iter().map(|r| r["checkpoint"].as_str().unwrap()).collect();
    assert_eq!(checkpoints, ["allocated", "freed"], "{name}");
    for r in rows {
        assert_eq!(r["match"], true, "{name}: {r}");
        let truth = &r["truth"];
        assert_eq!(r["gpumem_on_device"], truth["device"], "{name}: {r}");
        if r["checkpoint"] == "allocated" {
            // Pinned 2 MiB + 1 and 3 MiB, host pools 2 MiB and 1 MiB + 5;
            // managed 4 MiB and a managed pool's 2 MiB.
            assert_eq!(truth["host"], 5_242_881 + 3 * (1 << 20) + 5, "{name}: {r}");
            assert_eq!(truth["managed"], 6 * (1 << 20), "{name}: {r}");
        }
        for kind in ["host", "managed"] {
            assert_eq!(r["gpumem"].get(kind).cloned().unwrap_or(0.into()), truth[kind], "{name} {kind}: {r}");
        }
        let gpumem = r["gpumem_on_device"].as_u64().unwrap();
        assert_eq!(r["nvml_agent"].as_u64(), Some(gpumem + CONTEXT_COST), "{name}: the card's count: {r}");
    }
    assert_eq!(
        rows[0]["truth"]["device"],
        5_242_883 + 1_024 * 77 + 6 * (1 << 20) + 6 * (1 << 20) + (1 << 20),
        "{name}: 5 MiB + 3, a 1,000-byte row pitched to 1,024 x 77 rows, 6 MiB async, 5 MiB of VMM at the 2 MiB granularity (as on the real driver), 1 MiB from the device's pool"
    );
    assert_eq!(s["after_exit"]["released"], true, "{name}: {s}");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}
