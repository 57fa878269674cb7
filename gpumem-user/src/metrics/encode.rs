//! A [`Scrape`] in Prometheus' text format (OpenMetrics 1.0, which
//! Prometheus reads natively). A fresh registry per scrape: every series is
//! what the agent knows now, and a process or cgroup that holds nothing any
//! more is simply absent.
//!
//! Label values that are not known are empty, which Prometheus treats as
//! the label being absent (a process outside any container has no
//! `container_id`). `device` is the CUDA ordinal of the calling thread's
//! context, or empty where it was not known.
use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::text,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Registry, Unit},
};

use super::scrape::Scrape;
use crate::{
    enrich::container::Container,
    output::{SplitLine, StatusEntry},
};

/// A metric's labels, in order.
type Labels = Vec<(&'static str, String)>;
type Gauges = Family<Labels, Gauge<u64, AtomicU64>>;
type Counters = Family<Labels, Counter<u64>>;

/// The page `/metrics` serves.
pub fn encode(s: &Scrape) -> Result<String, std::fmt::Error> {
    let mut r = Registry::with_prefix("gpumem");
    memory(&mut r, s);
    limits(&mut r, s);
    records(&mut r, s);
    attached(&mut r, s);
    devices(&mut r, s);
    let mut out = String::new();
    text::encode(&mut out, &r)?;
    Ok(out)
}

/// The label value of an optional device ordinal.
fn device(d: Option<u32>) -> String {
    d.map(|d| d.to_string()).unwrap_or_default()
}

/// A gauge family, registered with the unit bytes (its name gets
/// `_bytes`).
fn bytes_family(r: &mut Registry, name: &str, help: &str) -> Gauges {
    let f = Gauges::default();
    r.register_with_unit(name, help, Unit::Bytes, f.clone());
    f
}

fn gauge_family(r: &mut Registry, name: &str, help: &str) -> Gauges {
    let f = Gauges::default();
    r.register(name, help, f.clone());
    f
}

/// A counter family (its samples get `_total`).
fn counter_family(r: &mut Registry, name: &str, help: &str) -> Counters {
    let f = Counters::default();
    r.register(name, help, f.clone());
    f
}

fn set(f: &Gauges, labels: Labels, v: u64) {
    f.get_or_create(&labels).set(v);
}

fn count(f: &Counters, labels: Labels, v: u64) {
    f.get_or_create(&labels).inc_by(v);
}

/// The labels naming an entry's cgroup and container: Kubernetes' names
/// (`namespace`, `pod`, `container`, as cAdvisor and kube-state-metrics
/// label them) where the kubelet's directories say them.
fn place(e: &StatusEntry) -> Labels {
    let c = e.container.as_ref();
    let field = |f: fn(&Container) -> Option<String>| c.and_then(f).unwrap_or_default();
    vec![
        ("cgroup", e.cgroup.clone().unwrap_or_default()),
        ("container_id", c.map(|c| c.id.clone()).unwrap_or_default()),
        ("runtime", c.map(|c| c.runtime.clone()).unwrap_or_default()),
        ("pod_uid", field(|c| c.pod_uid.clone())),
        ("namespace", field(|c| c.namespace.clone())),
        ("pod", field(|c| c.pod.clone())),
        ("container", field(|c| c.name.clone())),
    ]
}

fn split_labels(mut labels: Labels, l: &SplitLine) -> Labels {
    labels.push(("device", device(l.device)));
    labels.push(("kind", l.kind.clone()));
    labels
}

fn memory(r: &mut Registry, s: &Scrape) {
    let process = bytes_family(
        r,
        "process_memory",
        "GPU memory held per process, by device and kind, as the agent counts it from the driver calls",
    );
    for p in &s.status.processes {
        let mut who = vec![
            ("pid", p.pid.map(|p| p.to_string()).unwrap_or_default()),
            ("comm", p.comm.clone().unwrap_or_default()),
        ];
        who.extend(place(p));
        for l in &p.split {
            set(&process, split_labels(who.clone(), l), l.bytes);
        }
    }
    let cgroup =
        bytes_family(r, "cgroup_memory", "GPU memory held per cgroup (container, pod), by device and kind");
    for c in &s.status.cgroups {
        for l in &c.split {
            set(&cgroup, split_labels(place(c), l), l.bytes);
        }
    }
}

fn limits(r: &mut Registry, s: &Scrape) {
    let limit =
        bytes_family(r, "limit", "A limit in force: level hard (its action applies) or soft (reported)");
    let usage = bytes_family(r, "limit_usage", "What a limit counts now, as the kernel decides with it");
    for l in &s.limits {
        // Where the limit came from: "" for the operator's rules.
        let source = ("source", l.source.clone().unwrap_or_default());
        let target = vec![("target", l.target.clone()), ("device", device(l.device)), source];
        let with = |level: &'static str| {
            let mut v = target.clone();
            v.extend([("level", level.to_string()), ("action", l.action.clone())]);
            v
        };
        set(&limit, with("hard"), l.hard);
        if let Some(soft) = l.soft {
            set(&limit, with("soft"), soft);
        }
        set(&usage, target, l.usage);
    }
    let decisions = counter_family(
        r,
        "limit_decisions",
        "Calls that would cross a limit, per rule, level and the action taken",
    );
    for ((target, level, action), n) in &s.counts.decisions {
        let labels =
            vec![("target", target.clone()), ("level", level.to_string()), ("action", action.clone())];
        count(&decisions, labels, *n);
    }
    let failures = counter_family(
        r,
        "alloc_failures",
        "Allocations the driver refused, per device and CUresult (2: out of memory)",
    );
    for ((d, result), n) in &s.counts.failures {
        count(&failures, vec![("device", device(*d)), ("result", result.to_string())], *n);
    }
}

fn records(r: &mut Registry, s: &Scrape) {
    let st = &s.status;
    let one =
        |r: &mut Registry, name: &str, help: &str, v: u64| count(&counter_family(r, name, help), vec![], v);
    one(r, "records", "Kernel records applied to the agent's ledger", st.records);
    let lost = counter_family(
        r,
        "records_lost",
        "Records lost: the kernel's ring buffer was full (ring_full) or the output could not take them (unwritten)",
    );
    count(&lost, vec![("reason", "ring_full".into())], st.dropped);
    count(&lost, vec![("reason", "unwritten".into())], st.unwritten);
    one(r, "records_malformed", "Ring-buffer items that were not records", s.malformed);
    one(
        r,
        "records_late",
        "Records of a process image that reached the agent after its exit (already released with it)",
        st.late_records,
    );
    one(r, "skipped_runs", "Runs of gpumem's programs the kernel skipped", st.skipped_runs);
    one(r, "unmatched_returns", "Returns whose entry gpumem did not see", st.unmatched_returns);
}

fn attached(r: &mut Registry, s: &Scrape) {
    set(
        &gauge_family(
            r,
            "libraries_attached",
            "Library files (libcuda, and libnvidia-ml where the view is served) gpumem's probes are on",
        ),
        vec![],
        s.status.libraries.len() as u64,
    );
    set(
        &gauge_family(
            r,
            "libcuda_attached",
            "1 once a libcuda.so* is attached (0: the agent waits for the driver)",
        ),
        vec![],
        u64::from(s.status.libcuda_attached),
    );
    set(&gauge_family(r, "probes_attached", "Probes attached, over every library"), vec![], s.probes);
    set(
        &gauge_family(r, "nvml_available", "1 where NVML was loaded (the device_* series need it)"),
        vec![],
        u64::from(s.status.nvml),
    );
}

/// NVML's view, where it was loaded: each device's total and used, each
/// process's use as the driver counts it, and what of that gpumem did not
/// see allocated (contexts, modules).
fn devices(r: &mut Registry, s: &Scrape) {
    let total = bytes_family(r, "device_memory_total", "A device's memory, as NVML reports it");
    let used = bytes_family(r, "device_memory_used", "A device's memory in use, as NVML reports it");
    let driver =
        bytes_family(r, "driver_process_memory", "A process's memory on a device, as NVML reports it");
    let unaccounted = bytes_family(
        r,
        "process_unaccounted_memory",
        "What the driver holds for a process on a device beyond the device, array and VMM memory gpumem saw it allocate (contexts, modules, the driver's own)",
    );
    for d in &s.status.devices {
        let labels = vec![
            ("device", d.index.to_string()),
            ("uuid", d.uuid.clone().unwrap_or_default()),
            ("name", d.name.clone().unwrap_or_default()),
        ];
        if let Some(t) = d.total_bytes {
            set(&total, labels.clone(), t);
        }
        if let Some(u) = d.used_bytes {
            set(&used, labels, u);
        }
        for p in &d.processes {
            let Some(b) = p.used_bytes else { continue };
            let labels = vec![("pid", p.pid.to_string()), ("device", d.index.to_string())];
            set(&driver, labels.clone(), b);
            set(&unaccounted, labels, b.saturating_sub(s.status.resident(p.pid, d.index)));
        }
    }
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
