//! NVIDIA's own client, cuda-bindings from PyPI, allocating through the
//! simulated driver, is traced exactly like the workload generator.
use std::process::Command;

use gpumem_tests::harness::*;

#[test]
fn nvidia_cuda_bindings_allocations_are_traced_exactly() {
    if !privileged("nvidia_cuda_bindings_allocations_are_traced_exactly") {
        return;
    }
    let Some(python) = std::env::var_os("GPUMEM_PYTHON") else {
        println!(
            "SKIPPED nvidia_cuda_bindings_allocations_are_traced_exactly: GPUMEM_PYTHON is not set; \
             `cargo xtask test` sets it to the venv with cuda-bindings that `cargo xtask setup` makes"
        );
        return;
    };
    let p = paths();
    let agent = Agent::start(&[]);
    let cg = Cgroup::create("cuda-bindings");
    let mut cmd = Command::new(python);
    cmd.arg(p.root.join("tests/python/cuda_bindings_workload.py"))
        .arg("1")
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
        for l in lines
            .iter()
            .filter(|l| l["pid"] == pid && l["event"] == "alloc")
        {
            assert_eq!(
                l["api"], "cuMemAlloc_v2",
                "cuGetProcAddress(cuMemAlloc, 3020+) resolves to _v2"
            );
            assert_eq!(
                l["device"], 1,
                "the script made device 1's primary context current"
            );
        }
        w.resume();
    }
    w.finish();
    agent.wait_for("the exit record", |l| count(l, pid, "exit") == 1);
    let s = agent.status();
    assert_process_holds(&s, pid, 0);
    assert_cgroup_holds(&s, &cg, 0);
}
