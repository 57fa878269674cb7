//! Prometheus metrics (`gpumem run --metrics`), read the way an operator
//! reads them: a real Prometheus server (Debian's) scrapes the agent, and
//! its query API answers with what the workloads know they hold, exactly.
use std::{collections::BTreeMap, net::SocketAddr};

use gpumem::output::{DecisionEvent, RecordEvent};
use gpumem_tests::harness::{http, *};
use serde_json::Value;

/// The address the agent said it serves metrics on (`--metrics
/// 127.0.0.1:0` picks a free port).
fn metrics_addr(agent: &Agent) -> SocketAddr {
    let stderr = agent.stderr();
    let at = stderr.lines().find_map(|l| l.split("metrics at http://").nth(1));
    let at = at.unwrap_or_else(|| panic!("the agent did not say where its metrics are:\n{stderr}"));
    at.trim_end_matches("/metrics").parse().expect("an address and port")
}

/// A series' label, "-" where Prometheus has none (an empty label).
fn label<'a>(series: &'a Value, name: &str) -> &'a str {
    series[name].as_str().filter(|v| !v.is_empty()).unwrap_or("-")
}

/// `kind:device` -> bytes, as the workloads' truth keys its split.
fn split(result: &[(Value, f64)]) -> BTreeMap<String, u64> {
    result.iter().map(|(s, v)| (format!("{}:{}", label(s, "kind"), label(s, "device")), *v as u64)).collect()
}

/// The one value of a query that sums or selects one series.
fn one(result: &[(Value, f64)]) -> Option<u64> {
    match result {
        [(_, v)] => Some(*v as u64),
        _ => None,
    }
}

#[test]
fn prometheus_reads_what_each_process_cgroup_and_limit_holds_exactly() {
    if !privileged() {
        return;
    }
    let cg = Cgroup::create("metrics");
    let target = format!("cgroup:{}", cg.path);
    let limit = format!("{target}=1MiB,action=audit");
    let agent = Agent::start(&["--metrics", "127.0.0.1:0", "--limit", &limit]);
    let addr = metrics_addr(&agent);
    let Some(prom) = Prometheus::scraping(addr) else { return };
    families(&agent, &prom, &cg, &target);
    refusals(&agent, &prom, &cg);
    driver_view(&agent, &prom, &cg);
    endpoint(addr);
    assert!(agent.stop().0.success());
}

/// Every family of allocation, held: the split by kind and device, the
/// cgroup, the limit and its decisions; then gone with the process.
fn families(agent: &Agent, prom: &Prometheus, cg: &Cgroup, target: &str) {
    let mut w = Workload::spawn(&["--scenario", "families", "--pause"], Some(cg), &[]);
    let pid = w.pid();
    let all = w.checkpoint();
    let lines = agent.wait_for_checkpoint(&all);
    prom.wait_for(&format!("gpumem_process_memory_bytes{{pid=\"{pid}\"}}"), |r| split(r) == all.split);
    let in_cgroup = format!("sum(gpumem_cgroup_memory_bytes{{cgroup=\"{}\"}})", cg.path);
    prom.wait_for(&in_cgroup, |r| one(r) == Some(all.held));
    prom.wait_for(&format!("gpumem_limit_usage_bytes{{target=\"{target}\"}}"), |r| one(r) == Some(all.held));
    let hard = format!("gpumem_limit_bytes{{target=\"{target}\",level=\"hard\",action=\"audit\"}}");
    prom.wait_for(&hard, |r| one(r) == Some(1 << 20));
    // Audit: every call past 1 MiB was a decision, and went ahead.
    let decided = lines.decisions(pid, DecisionEvent::Limit).len() as u64;
    assert!(decided > 0, "the families hold more than 1 MiB");
    let decisions =
        format!("gpumem_limit_decisions_total{{target=\"{target}\",level=\"hard\",action=\"audit\"}}");
    prom.wait_for(&decisions, |r| one(r) == Some(decided));
    w.resume();
    w.resume();
    w.finish();
    agent.wait_for_exit(pid);
    // Gone from the next scrape: Prometheus marks the series stale.
    prom.wait_for(&format!("gpumem_process_memory_bytes{{pid=\"{pid}\"}}"), |r| r.is_empty());
    prom.wait_for(&in_cgroup, |r| r.is_empty());
}

/// Allocations the driver refused, per device and result, as the records
/// list them.
fn refusals(agent: &Agent, prom: &Prometheus, cg: &Cgroup) {
    // An 11 MiB card: its context takes 2, then 3 MiB chunks: three fit,
    // the fourth is refused.
    let card = SimCard::new(11 << 20);
    let mut oom =
        Workload::spawn(&["--scenario", "oom", "--size", "3145728", "--pause"], Some(cg), &card.env());
    let full = oom.checkpoint();
    assert_eq!((full.allocs, full.failed), (3, 1));
    let lines = agent.wait_for_checkpoint(&full);
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines.all_events(RecordEvent::AllocFailed) {
        let device = l.device.map_or("-".into(), |d| d.to_string());
        *refused.entry(format!("{}:{device}", l.result.unwrap_or(0))).or_default() += 1;
    }
    assert_eq!(refused.get("2:0"), Some(&1), "the oom workload's refusal, on device 0: {refused:?}");
    prom.wait_for("gpumem_alloc_failures_total", |r| {
        let got: BTreeMap<String, u64> = r
            .iter()
            .map(|(s, v)| (format!("{}:{}", label(s, "result"), label(s, "device")), *v as u64))
            .collect();
        got == refused
    });
    let device = format!("gpumem_process_memory_bytes{{pid=\"{}\",kind=\"device\"}}", full.pid);
    prom.wait_for(&device, |r| one(r) == Some(full.held));
    prom.wait_for("gpumem_libraries_attached", |r| one(r) == Some(1));
    prom.wait_for("sum(gpumem_records_lost_total)", |r| one(r) == Some(0));
    oom.resume();
    oom.checkpoint();
    oom.resume();
    oom.finish();
}

/// The endpoint itself: OpenMetrics text at /metrics, nothing elsewhere.
fn endpoint(addr: SocketAddr) {
    let page = http::get(addr, "/metrics").unwrap();
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")));
    assert!(page.body.ends_with("# EOF\n"), "{}", page.body);
    assert_eq!(http::get(addr, "/").unwrap().status, 404);
    let post = http::request(addr, "POST", "/metrics").unwrap();
    assert_eq!((post.status, post.header("allow")), (405, Some("GET, HEAD")));
}

/// NVML's view (the simulated NVML reading the host's simulated card):
/// the device's capacity, the driver's per-process figure (what the
/// process allocated and its context), and what gpumem did not see
/// allocated, which is exactly the context.
fn driver_view(agent: &Agent, prom: &Prometheus, cg: &Cgroup) {
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], Some(cg), &[]);
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    let pid = c.pid;
    prom.wait_for("gpumem_nvml_available", |r| one(r) == Some(1));
    prom.wait_for("gpumem_device_memory_total_bytes{device=\"0\"}", |r| one(r) == Some(16 << 30));
    let driver = format!("gpumem_driver_process_memory_bytes{{pid=\"{pid}\",device=\"0\"}}");
    prom.wait_for(&driver, |r| one(r) == Some(c.held + CONTEXT_COST));
    let unaccounted = format!("gpumem_process_unaccounted_memory_bytes{{pid=\"{pid}\",device=\"0\"}}");
    prom.wait_for(&unaccounted, |r| one(r) == Some(CONTEXT_COST));
    w.run_to_end();
}
