//! NVIDIA's own client, cuda-bindings from PyPI, allocating through the
//! simulated driver, is traced exactly like the workload generator.
use std::process::Command;

use gpumem::output::RecordEvent;
use gpumem_tests::harness::*;

#[test]
fn nvidia_cuda_bindings_is_traced_exactly_with_legacy_default_streams() {
    traced_exactly(false);
}

#[test]
fn nvidia_cuda_bindings_is_traced_exactly_with_per_thread_default_streams() {
    traced_exactly(true);
}

fn traced_exactly(per_thread: bool) {
    if !privileged() {
        return;
    }
    let Some(python) =
        provided("GPUMEM_PYTHON", "sets it to the venv with cuda-bindings that `cargo xtask setup` makes")
    else {
        return;
    };
    let suffix = if per_thread { "_ptsz" } else { "" };
    let p = paths();
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("cuda-bindings");
    let mut cmd = Command::new(python);
    cmd.arg(p.root.join("tests/python/cuda_bindings_workload.py"))
        .arg("1")
        .env("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", if per_thread { "1" } else { "0" })
        .env("LD_LIBRARY_PATH", p.libcuda.parent().unwrap());
    let mut w = Workload::from_command(cmd, Some(&cg));
    let pid = w.pid();
    for name in ["allocated", "freed"] {
        let c = w.checkpoint();
        assert_eq!((c.checkpoint.as_str(), c.pid), (name, pid));
        let lines = agent.wait_for_checkpoint(&c);
        let s = agent.status();
        assert_process_holds(&s, pid, c.held);
        assert_cgroup_holds(&s, &cg, c.held);
        let apis: std::collections::BTreeSet<&str> = [RecordEvent::Alloc, RecordEvent::Free]
            .into_iter()
            .flat_map(|e| lines.events(pid, e))
            .map(|l| l.caller.api.as_ref())
            .collect();
        let mut expect = vec!["cuMemAlloc_v2".to_string(), format!("cuMemAllocAsync{suffix}")];
        if name == "freed" {
            expect.extend(["cuMemFree_v2".to_string(), format!("cuMemFreeAsync{suffix}")]);
        }
        let expect: std::collections::BTreeSet<&str> = expect.iter().map(String::as_str).collect();
        assert_eq!(apis, expect, "the entry points cuGetProcAddress resolved");
        for l in lines.events(pid, RecordEvent::Alloc) {
            assert_eq!(l.device, Some(1), "the script made device 1's primary context current");
        }
        w.resume();
    }
    w.finish();
    agent.wait_for_exit(pid);
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);
}
