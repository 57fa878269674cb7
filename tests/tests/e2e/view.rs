//! What a limited process sees: under a limit with `view=limit` (the
//! default where the kernel lets uprobe programs write user memory), every
//! form of `cuMemGetInfo` and `cuDeviceTotalMem` tells the process its
//! limit as the card's size and what is left under it as free, so a
//! client that sizes itself from the card (75% of the total, as JAX does)
//! sizes itself to the limit and runs to the end. The kernel matrix runs
//! these (stock kernels have no lockdown); on a kernel that refuses user
//! memory writes (this host) the refusal test runs instead.
use gpumem::output::StatusReport;
use gpumem_tests::{
    harness::*,
    view::{Figures, Seen},
};

const MIB: u64 = 1 << 20;
/// The simulated card's devices in these tests.
const CARD: u64 = 4 << 30;

/// True where view=limit can run; else says why the test is skipped.
fn view_runs_here() -> bool {
    if !privileged() {
        return false;
    }
    if let Some(why) = user_write_refusal() {
        skip(&format!(
            "this kernel does not let uprobe programs write user memory ({why}); `cargo xtask test` runs it on \
             the matrix kernels that do"
        ));
        return false;
    }
    true
}

/// Each step of the `view` scenario: what it saw, then its checkpoint;
/// the workload is left paused at the last (`done`).
fn steps(w: &mut Workload, agent: &Agent) -> Vec<(Seen, StatusReport)> {
    let mut out = Vec::new();
    for (i, name) in ["asked", "preallocated", "grown", "done"].into_iter().enumerate() {
        if i > 0 {
            w.resume();
        }
        let seen: Seen = w.line();
        let c = w.checkpoint();
        assert_eq!((seen.step.as_str(), c.checkpoint.as_str()), (name, name));
        agent.wait_for_checkpoint(&c);
        let s = agent.status();
        assert_process_holds(&s, c.pid, c.held);
        out.push((seen, s));
    }
    out
}

/// Every form of the query on one device told `total` and `free`; NVML's
/// the rest as used and none reserved (the simulated NVML reserves none,
/// and the view reserves none of a limit's card).
fn told(f: &Figures, free: u64, total: u64) {
    assert_eq!((f.info, f.info_proc), ((free, total), (free, total)), "device {}: {f:?}", f.device);
    let narrow = |v: u64| v.min(u64::from(u32::MAX)) as u32;
    assert_eq!(f.info_v1, (narrow(free), narrow(total)), "device {} (32-bit): {f:?}", f.device);
    assert_eq!((f.total, f.total_v1), (total, narrow(total)), "device {}: {f:?}", f.device);
    let used = total - free;
    assert_eq!(
        (f.nvml.v1, f.nvml.v2),
        ((total, free, used), (total, 0, free, used)),
        "device {} (NVML)",
        f.device
    );
}

/// An agent on `card` that also answers the memory queries of the
/// simulated NVML beside the simulated driver.
fn agent_with_nvml(card: &SimCard, extra: &[&str]) -> Agent {
    let nvml = paths().libcuda.with_file_name("libnvidia-ml.so.1");
    Agent::start_on(card, &[&["--libnvml", nvml.to_str().unwrap()][..], extra].concat())
}

#[test]
fn a_limited_process_is_told_its_limit_and_sizes_itself_to_it() {
    if !view_runs_here() {
        return;
    }
    let card = SimCard::new(CARD);
    let cg = Cgroup::create("view-limited");
    let limit = format!("cgroup:{}=256MiB,action=deny,fallback=signal:SIGKILL", cg.path);
    let agent = agent_with_nvml(&card, &["--limit", &limit, "--bpf-log"]);
    assert_eq!(agent.limits()[0].view, "limit", "the default where the kernel allows it");
    let mut w = Workload::spawn(&["--scenario", "view", "--pause"], Some(&cg), &card.env());
    let seen = steps(&mut w, &agent);
    // The limit counts every device: device 1 is told the same figures.
    let l = 256 * MIB;
    for (i, held) in [0, 0, 192 * MIB, 224 * MIB].into_iter().enumerate() {
        for f in &seen[i].0.devices {
            told(f, l - held, l);
        }
    }
    let asked: Vec<(u64, i32)> = seen.iter().map(|(s, _)| (s.asked, s.result)).collect();
    assert_eq!(
        asked,
        [(0, 0), (192 * MIB, 0), (32 * MIB, 0), (0, 0)],
        "75% of the limit, then half of the rest"
    );
    // 4 steps x 2 devices x 7 queries (5 of libcuda, 2 of NVML), each
    // answered with the limit, and logged with --bpf-log.
    assert_eq!(seen[3].1.view_rewrites, 56);
    let logged = format!(
        "gpumem: bpf: view: cuDeviceTotalMem on device 1 answered total {l} free at most {}",
        32 * MIB
    );
    agent.wait_for_state("the view's --bpf-log line", || agent.stderr(), |e| e.contains(&logged));
    // An unlimited process beside it sees the card as it is.
    let mut other = Workload::spawn(&["--scenario", "view", "--pause"], None, &card.env());
    let first: Seen = other.line();
    let c = other.checkpoint();
    let on_card = |dev: usize| -> u64 {
        [w.pid(), c.pid].iter().map(|&p| card.held(p, dev)).map(|(m, ctx)| m + ctx).sum()
    };
    for f in &first.devices {
        told(f, CARD - on_card(f.device as usize), CARD);
    }
    drop(other);
    w.finish();
}

#[test]
fn each_query_sees_the_smallest_limit_that_counts_its_device() {
    if !view_runs_here() {
        return;
    }
    let card = SimCard::new(CARD);
    let cg = Cgroup::create("view-two-limits");
    let agent = agent_with_nvml(&card, &["--limit", &format!("cgroup:{}=512MiB,action=audit", cg.path)]);
    let mut w =
        Workload::spawn(&["--scenario", "view", "--pause", "--hold-at-start"], Some(&cg), &card.env());
    let _loaded = w.checkpoint();
    let pid_limit = format!("pid:{}=384MiB,device=1,action=audit", w.pid());
    let (ok, _, err) = agent.limit(&["set", &pid_limit]);
    assert!(ok, "{err}");
    w.resume();
    let seen = steps(&mut w, &agent);
    // Device 0: the cgroup's 512 MiB only. Device 1: the smaller of the
    // process's 384 MiB (device 1 only) and what the cgroup leaves.
    told(&seen[0].0.devices[0], 512 * MIB, 512 * MIB);
    told(&seen[0].0.devices[1], 384 * MIB, 384 * MIB);
    assert_eq!((seen[1].0.asked, seen[1].0.result), (384 * MIB, 0), "75% of device 0's 512 MiB");
    told(&seen[2].0.devices[0], 128 * MIB, 512 * MIB);
    told(&seen[2].0.devices[1], 128 * MIB, 384 * MIB);
    w.finish();
}

#[test]
fn view_driver_shows_the_card_and_a_client_sizing_to_it_crosses_the_limit() {
    if !view_runs_here() {
        return;
    }
    let card = SimCard::new(CARD);
    let cg = Cgroup::create("view-driver");
    // Denied where the kernel can rewrite registers; audited elsewhere.
    let deny = register_write_refusal().is_none();
    let action = if deny { "deny" } else { "audit" };
    let limit = format!("cgroup:{}=256MiB,action={action},view=driver", cg.path);
    let agent = agent_with_nvml(&card, &["--limit", &limit]);
    assert_eq!(agent.limits()[0].view, "driver");
    let mut w = Workload::spawn(&["--scenario", "view", "--pause"], Some(&cg), &card.env());
    let seen = steps(&mut w, &agent);
    told(&seen[0].0.devices[0], CARD - card.held(w.pid(), 0).1, CARD);
    // 75% of the 4 GiB it was told: far past the 256 MiB limit at once.
    assert_eq!(seen[1].0.asked, CARD / 4 * 3);
    if deny {
        assert_eq!(seen[1].0.result, 2, "denied at its first allocation");
    } else {
        assert!(agent.limits()[0].usage > 256 * MIB, "audited past the limit: {:?}", agent.limits());
    }
    assert_eq!(seen[3].1.view_rewrites, 0);
    w.finish();
}

/// Runs the kit's `memory_view.py` (cuda-bindings, numba-cuda and NVML
/// through cuda-bindings, unmodified) on `card`, in `cgroup` if given, and
/// returns what it was told, once it has exited.
fn real_clients(
    python: &std::ffi::OsStr,
    card: &SimCard,
    cgroup: Option<&Cgroup>,
    agent: &Agent,
) -> serde_json::Value {
    let p = paths();
    let mut cmd = std::process::Command::new(python);
    // The matrix's guests carry the kit elsewhere (GPUMEM_KIT_WORKLOADS).
    let kit = std::env::var_os("GPUMEM_KIT_WORKLOADS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| p.root.join("tests/gpukit/workloads"));
    cmd.arg(kit.join("memory_view.py")).env("LD_LIBRARY_PATH", p.libcuda.parent().unwrap()).envs(card.env());
    let mut w = Workload::from_command(cmd, cgroup);
    let told: serde_json::Value = w.line();
    let pid = w.pid();
    w.finish();
    agent.wait_for_exit(pid);
    told
}

/// Real clients, unmodified, under a 256 MiB limit on a 4 GiB card, each
/// holding 64 MiB: cuda-bindings' cuMemGetInfo and cuDeviceTotalMem,
/// numba-cuda's get_memory_info and NVML's nvmlDeviceGetMemoryInfo_v2 are
/// all told 256 MiB total and 192 MiB free, and 75% of that total is
/// allocated under deny; the same clients beside it, under no limit, see
/// the card.
#[test]
fn real_clients_are_told_their_limit_and_one_beside_them_the_card() {
    if !view_runs_here() {
        return;
    }
    let Some(python) = provided(
        "GPUMEM_PYTHON",
        "sets it to the venv with cuda-bindings and numba-cuda that `cargo xtask setup` makes (the matrix's \
         initramfs carries it)",
    ) else {
        return;
    };
    let card = SimCard::new(CARD);
    let cg = Cgroup::create("view-clients");
    let limit = format!("cgroup:{}=256MiB,action=deny,fallback=signal:SIGKILL", cg.path);
    let agent = agent_with_nvml(&card, &["--limit", &limit]);
    let (l, held) = (256 * MIB, 64 * MIB);
    let limited = real_clients(&python, &card, Some(&cg), &agent);
    let told = |total: u64, free: u64, asked: u64| {
        serde_json::json!({
            "cuda_bindings": { "free": free, "total": total, "device_total": total },
            "numba": { "free": free, "total": total },
            "nvml": { "total": total, "reserved": 0, "free": free, "used": total - free },
            "preallocated": { "asked": asked, "result": 0 },
        })
    };
    let seen = |v: &serde_json::Value| {
        let keys = ["cuda_bindings", "numba", "nvml", "preallocated"];
        serde_json::Value::Object(keys.iter().map(|&k| (k.to_string(), v[k].clone())).collect())
    };
    assert_eq!(seen(&limited), told(l, l - held, l / 4 * 3), "under the limit: {limited}");
    assert!(agent.status().view_rewrites >= 4, "each client's query was answered by the kernel");
    // Beside it, under no limit: the card, less what this process holds
    // (its 64 MiB and its context; the limited one has exited).
    let other = real_clients(&python, &card, None, &agent);
    let free = CARD - held - CONTEXT_COST;
    assert_eq!(seen(&other), told(CARD, free, CARD / 4 * 3), "under no limit: {other}");
}

/// Where the kernel refuses user memory writes (this host): `gpumem probe`
/// says so with the reason, an explicit `view=limit` is refused with it,
/// and the agent says once that limited processes see the card as it is.
#[test]
fn view_limit_is_refused_where_the_kernel_cannot_write_user_memory() {
    if !privileged() {
        return;
    }
    let Some(why) = user_write_refusal() else {
        skip("this kernel lets uprobe programs write user memory, so view=limit is not refused here");
        return;
    };
    assert!(why.contains("view=limit"), "{why}");
    let cg = Cgroup::create("view-refused");
    let dir = scratch();
    let mut run = std::process::Command::new(paths().agent)
        .args(["run", "--libcuda"])
        .arg(&paths().libcuda)
        .args(["--limit", &format!("cgroup:{}=256MiB,view=limit", cg.path)])
        .arg("--socket")
        .arg(dir.path().join("refused.sock"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running gpumem run");
    // It must refuse at start; an agent that started instead is stopped
    // here, and the test fails.
    let until = std::time::Instant::now() + DEADLINE;
    let exited = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > until {
            let _ = run.kill();
            let _ = run.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    let refused = exited.is_some_and(|s| !s.success());
    assert!(refused && err.contains("view=limit needs a kernel"), "exit {exited:?}: {err}");
    let agent = Agent::start(&["--limit", &format!("cgroup:{}=256MiB", cg.path)]);
    assert_eq!(agent.limits()[0].view, "driver", "the default where the kernel refuses");
    assert_eq!(agent.stderr().matches("limited processes see the card as it is").count(), 1);
}
