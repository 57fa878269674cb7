//! `gpumem probe`: what this kernel and host allow gpumem to do, each
//! capability yes or no with the reason, checked by doing it.
use serde::Serialize;

use crate::{bpf::Tracer, cli::ProbeArgs, enrich::cgroup::cgroup2_mount, privileges};

#[derive(Debug, Serialize)]
pub struct Capability {
    pub name: &'static str,
    pub available: bool,
    pub reason: String,
}

fn cap(name: &'static str, available: bool, reason: impl Into<String>) -> Capability {
    Capability { name, available, reason: reason.into() }
}

fn path_check(name: &'static str, path: &str, what: &str) -> Capability {
    let ok = std::path::Path::new(path).exists();
    cap(name, ok, if ok { format!("{path} exists") } else { format!("{path} is missing: {what}") })
}

/// Every capability, in the order they build on each other.
pub fn capabilities() -> Vec<Capability> {
    let mut caps = Vec::new();
    caps.push(match privileges::check() {
        Ok(()) => cap("privileges", true, "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) are effective"),
        Err(e) => cap("privileges", false, e.to_string()),
    });
    caps.push(path_check("uprobes", "/sys/bus/event_source/devices/uprobe/type", "no uprobe PMU"));
    caps.push(path_check("btf", "/sys/kernel/btf/vmlinux", "the kernel was built without BTF"));
    let mount = std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|m| cgroup2_mount(&m));
    caps.push(match mount {
        Some(m) => cap("cgroup_v2", true, format!("mounted at {}", m.display())),
        None => cap("cgroup_v2", false, "no cgroup2 mount: cgroup ids and limits are unavailable"),
    });
    match Tracer::load() {
        Ok(mut tracer) => {
            caps.push(cap(
                "ring_buffer",
                true,
                "the agent's object, with its ring buffer and every program, loaded",
            ));
            caps.push(cap(
                "signal_from_bpf",
                true,
                "the allocation entry programs, which call bpf_send_signal, passed the verifier",
            ));
            caps.push(match tracer.register_write_refusal() {
                None => cap("uprobe_register_writes", true, "a uprobe program storing into pt_regs loaded"),
                Some(why) => {
                    cap("uprobe_register_writes", false, format!("{why}: limits cannot use action deny"))
                }
            });
        }
        Err(e) => {
            let why = format!("{:#}", anyhow::Error::from(e));
            for name in ["ring_buffer", "signal_from_bpf", "uprobe_register_writes"] {
                caps.push(cap(name, false, format!("loading gpumem's eBPF object failed: {why}")));
            }
        }
    }
    caps
}

pub fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let caps = capabilities();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "kernel": kernel, "capabilities": caps }))?
        );
    } else {
        println!("kernel {kernel}");
        for c in &caps {
            println!("{:<24} {:<4} {}", c.name, if c.available { "yes" } else { "no" }, c.reason);
        }
    }
    Ok(())
}
