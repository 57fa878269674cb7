//! NVIDIA's own driver library, as users run it: `libcuda.so.1` of the 535,
//! 550 and 555 series from Debian's non-free packages (bookworm, trixie,
//! and experimental, the newest any suite carries; `cargo xtask test`
//! fetches them and names them in `GPUMEM_NVIDIA_LIBCUDA`). There is no
//! GPU here, so every allocation fails with CUDA_ERROR_NOT_INITIALIZED,
//! through the same exported stubs a GPU's users call: enough to prove
//! where the probes sit and that calls through dlsym and cuGetProcAddress_v2
//! are all seen.
use std::{path::PathBuf, process::Command};

use gpumem::output::RecordEvent;
use gpumem_tests::{
    harness::*,
    no_device::{Made, ROUND_APIS},
};
use serde::Deserialize;

/// CUDA_ERROR_NOT_INITIALIZED: what NVIDIA's library answers every
/// allocation on a machine with no device.
const NOT_INITIALIZED: u32 = 3;

/// The NVIDIA libraries `cargo xtask test` fetched; None (the test says
/// why it is skipped) when the variable is not set.
fn libraries() -> Option<Vec<PathBuf>> {
    let list = provided(
        "GPUMEM_NVIDIA_LIBCUDA",
        "fetches NVIDIA's libcuda1 (535, 550, 555) from Debian's non-free packages and sets it",
    )?;
    let libs: Vec<PathBuf> = std::env::split_paths(&list).collect();
    assert_eq!(libs.len(), 3, "NVIDIA's 535, 550 and 555 libraries, in {list:?}");
    Some(libs)
}

#[derive(Debug, Deserialize)]
struct ProbeReport {
    libraries: Vec<LibrarySites>,
}

#[derive(Debug, Deserialize)]
struct LibrarySites {
    path: String,
    summary: Summary,
    sites: Vec<SiteLine>,
    missing: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Summary {
    emulated: usize,
    shifted: usize,
    single_stepped: usize,
}

#[derive(Debug, Deserialize)]
struct SiteLine {
    symbol: String,
    offset: u32,
    how: String,
    ret: Option<u32>,
}

/// What `gpumem probe --json` reports for these files, each after its
/// flag (`--libcuda`, `--libnvml`).
fn probe(files: impl Iterator<Item = (&'static str, PathBuf)>) -> ProbeReport {
    let mut c = Command::new(paths().agent);
    c.args(["probe", "--json"]);
    for (flag, file) in files {
        c.arg(flag).arg(file);
    }
    let out = c.output().expect("running gpumem probe");
    assert!(out.status.success(), "gpumem probe failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("gpumem probe --json")
}

#[test]
fn every_nvidia_entry_point_is_probed_at_its_je_past_the_stubs_compare() {
    let Some(libs) = libraries() else { return };
    let report = probe(libs.iter().map(|l| ("--libcuda", l.clone())));
    assert_eq!(report.libraries.len(), libs.len());
    for lib in &report.libraries {
        println!("{}: {:?}, not exported: {:?}", lib.path, lib.summary, lib.missing);
        assert!(lib.sites.len() >= 35, "{}: only {} probes placed", lib.path, lib.sites.len());
        assert_eq!((lib.summary.emulated, lib.summary.single_stepped), (0, 0), "{}", lib.path);
        assert_eq!(lib.summary.shifted, lib.sites.len(), "{}", lib.path);
        for s in &lib.sites {
            // cmpl $0x321cba00, state(%rip) is 10 bytes; the `je` follows,
            // and the stub's `ret` is at 0x1d.
            assert_eq!(
                (s.offset, s.how.as_str(), s.ret),
                (10, "shifted", Some(0x1d - 10)),
                "{}: {s:?}",
                lib.path
            );
        }
        for required in ["cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz"] {
            assert!(lib.sites.iter().any(|s| s.symbol == required), "{}: no probe on {required}", lib.path);
        }
    }
}

/// NVIDIA's management library beside each libcuda: NVML's memory queries
/// and the handle getters the view learns devices from are all exported
/// and probed where the kernel emulates their first instruction.
#[test]
fn nvidias_nvml_memory_queries_are_probed_without_a_second_trap() {
    let Some(libs) = libraries() else { return };
    let report = probe(libs.iter().map(|l| ("--libnvml", l.with_file_name("libnvidia-ml.so.1"))));
    assert_eq!(report.libraries.len(), libs.len());
    for lib in &report.libraries {
        println!("{}: {:?}", lib.path, lib.sites);
        let mut symbols: Vec<&str> = lib.sites.iter().map(|s| s.symbol.as_str()).collect();
        symbols.sort_unstable();
        assert_eq!(
            symbols,
            [
                "nvmlDeviceGetHandleByIndex",
                "nvmlDeviceGetHandleByIndex_v2",
                "nvmlDeviceGetMemoryInfo",
                "nvmlDeviceGetMemoryInfo_v2"
            ],
            "{}: NVML's rows only, each placed",
            lib.path
        );
        assert!(lib.missing.is_empty(), "{}: {:?}", lib.path, lib.missing);
        assert_eq!(lib.summary.single_stepped, 0, "{}: {:?}", lib.path, lib.summary);
    }
}

#[test]
fn nvidia_allocations_through_dlsym_and_cu_get_proc_address_are_each_recorded_with_their_result() {
    let Some(libs) = libraries() else { return };
    if !privileged() {
        return;
    }
    let mut extra = Vec::new();
    for l in &libs {
        extra.extend(["--libcuda", l.to_str().unwrap()]);
    }
    let agent = Agent::start(&extra);
    for (i, lib) in libs.iter().enumerate() {
        let size = format!("{}", 12_345 + i);
        let args =
            ["--libcuda", lib.to_str().unwrap(), "--scenario", "no-device", "--iterations", "3", "--size"];
        let mut w = Workload::spawn(&[&args[..], &[&size]].concat(), None, &[]);
        let pid = w.pid();
        let made: Made = w.line();
        assert_eq!(made.init, 100, "{}: cuInit without a device is CUDA_ERROR_NO_DEVICE", lib.display());
        let apis: Vec<&str> = made.calls.iter().map(|c| c.api.as_str()).collect();
        assert_eq!(apis, ROUND_APIS.repeat(3), "{}: the exports the calls went through", lib.display());
        let c = w.checkpoint();
        assert_eq!((c.checkpoint.as_str(), c.failed), ("refused", made.calls.len() as u64));
        let lines = agent.wait_for_checkpoint(&c);
        let seen: Vec<(&str, u64, Option<u32>)> = lines
            .events(pid, RecordEvent::AllocFailed)
            .iter()
            .map(|l| (l.caller.api.as_ref(), l.size, l.result))
            .collect();
        let truth: Vec<(&str, u64, Option<u32>)> =
            made.calls.iter().map(|c| (c.api.as_str(), c.size, Some(c.result as u32))).collect();
        assert_eq!(seen, truth, "{}: each refused call, in order, with its size and result", lib.display());
        assert!(truth.iter().all(|t| t.2 == Some(NOT_INITIALIZED)), "{}: {truth:?}", lib.display());
        w.finish();
        assert_process_holds(&agent.status(), pid, 0);
    }
}

/// NVIDIA's own management library (`libnvidia-ml1` of the same driver,
/// beside each `libcuda.so.1`) with no driver loaded: the agent says NVML
/// is not available and why, and traces and answers `status` all the same.
#[test]
fn nvidias_nvml_without_a_driver_is_said_and_the_agent_carries_on() {
    if !privileged() {
        return;
    }
    let Some(libs) = libraries() else { return };
    for lib in libs {
        let dir = lib.parent().unwrap().to_str().unwrap();
        assert!(lib.with_file_name("libnvidia-ml.so.1").exists(), "no NVML beside {}", lib.display());
        let agent = Agent::start_with_env(&[("LD_LIBRARY_PATH", dir)], &[]);
        let said = agent.stderr();
        let line = said.lines().find(|l| l.contains("NVML is not available"));
        assert!(line.is_some_and(|l| l.contains("NVIDIA driver is not loaded")), "{dir}: {said}");
        let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], None, &[]);
        let c = w.checkpoint();
        agent.wait_for_checkpoint(&c);
        let s = agent.status();
        assert!(!s.nvml && s.devices.is_empty(), "{s:?}");
        assert_process_holds(&s, w.pid(), c.held);
        w.run_to_end();
    }
}
