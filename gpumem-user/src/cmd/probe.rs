//! `gpumem probe`: what this kernel and host allow gpumem to do, each
//! capability yes or no with the reason, checked by doing it (aya's feature
//! probes, and loading gpumem's own object); with `--libcuda`, where each
//! probe would sit in that library and how this kernel would run it.
use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{is_helper_supported, is_map_supported, BpfHelper},
};
use gpumem_common::api::Library;
use serde::Serialize;

use crate::{
    bpf::{
        placement::{plan, SiteLine},
        site::{Emulation, Summary},
        symbols::SymbolOffsets,
        Tracer,
    },
    cli::ProbeArgs,
    cmd::status::table,
    enrich::cgroup::host_cgroup2_mount,
    privileges,
};

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

/// A kernel feature probe's answer as a capability.
fn probed<E: std::fmt::Display>(
    name: &'static str,
    answer: Result<bool, E>,
    yes: &str,
    no: &str,
) -> Capability {
    match answer {
        Ok(true) => cap(name, true, yes),
        Ok(false) => cap(name, false, no),
        Err(e) => cap(name, false, format!("the kernel's feature probe failed: {e}")),
    }
}

/// Every capability, in the order they build on each other.
pub fn capabilities() -> Vec<Capability> {
    let mut caps = vec![match privileges::check() {
        Ok(()) => cap("privileges", true, "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) are effective"),
        Err(e) => cap("privileges", false, e.to_string()),
    }];
    caps.push(path_check("uprobes", "/sys/bus/event_source/devices/uprobe/type", "no uprobe PMU"));
    caps.push(path_check("btf", "/sys/kernel/btf/vmlinux", "the kernel was built without BTF"));
    caps.push(match host_cgroup2_mount() {
        Some(m) => cap("cgroup_v2", true, format!("mounted at {}", m.display())),
        None => cap("cgroup_v2", false, "no cgroup2 mount: cgroup ids and limits are unavailable"),
    });
    caps.push(probed(
        "ring_buffer",
        is_map_supported(MapType::RingBuf),
        "BPF_MAP_TYPE_RINGBUF maps can be created",
        "this kernel has no BPF ring buffer (5.8 or newer needed)",
    ));
    caps.push(probed(
        "signal_from_bpf",
        is_helper_supported(ProgramType::KProbe, BpfHelper::BPF_FUNC_send_signal),
        "uprobe programs may call bpf_send_signal",
        "uprobe programs may not call bpf_send_signal: limits cannot use action signal",
    ));
    caps.push(match crate::bpf::multi_links() {
        Ok(()) => cap(
            "uprobe_multi",
            true,
            "multi-uprobe links can be made: one link per program and library, detached in milliseconds",
        ),
        Err(why) => cap("uprobe_multi", false, format!("{why}: single links, about 100 ms each to detach")),
    });
    caps.push(match crate::bpf::register_write_refusal() {
        None => cap("uprobe_register_writes", true, "a uprobe program storing into pt_regs loaded"),
        Some(why) => cap("uprobe_register_writes", false, format!("{why}: limits cannot use action deny")),
    });
    match Tracer::load() {
        Ok(tracer) => {
            caps.push(match tracer.view_refusal() {
                None => {
                    cap("user_memory_writes", true, "a uprobe program calling bpf_probe_write_user loaded")
                }
                Some(why) => cap(
                    "user_memory_writes",
                    false,
                    format!("{why}: limited processes see the card as it is (limits cannot use view=limit)"),
                ),
            });
        }
        Err(e) => {
            let why = format!("loading gpumem's eBPF object failed: {}", crate::chain(&e));
            caps.push(cap("user_memory_writes", false, why));
        }
    }
    caps
}

/// Where each probe would sit in one library, for this kernel.
#[derive(Debug, Serialize)]
pub struct LibrarySites {
    pub path: String,
    pub summary: Summary,
    pub sites: Vec<SiteLine>,
    pub missing: Vec<&'static str>,
    pub aliases: Vec<(&'static str, &'static str)>,
}

/// The probe sites of every library in `paths`, each with the rows of
/// its library.
pub fn library_sites(paths: &[(&std::path::PathBuf, Library)]) -> anyhow::Result<Vec<LibrarySites>> {
    let emulation = Emulation::current();
    paths
        .iter()
        .map(|&(path, kind)| {
            let symbols = SymbolOffsets::load(path)?;
            let plan = plan(&symbols, emulation, kind);
            let mut missing = plan.missing_required.clone();
            missing.extend(&plan.missing);
            Ok(LibrarySites {
                path: path.display().to_string(),
                summary: Summary::of(plan.placed.iter().map(|p| &p.site)),
                sites: plan.placed.iter().map(SiteLine::from).collect(),
                missing,
                aliases: plan.aliases,
            })
        })
        .collect()
}

pub fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let caps = capabilities();
    let paths: Vec<_> = (args.libcuda.iter().map(|p| (p, Library::Cuda)))
        .chain(args.libnvml.iter().map(|p| (p, Library::Nvml)))
        .collect();
    let libraries = library_sites(&paths)?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    if args.json {
        let report = serde_json::json!({ "kernel": kernel, "capabilities": caps, "libraries": libraries });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("kernel {kernel}");
    let mut t = table(&["CAPABILITY", "", "WHY"], 3);
    for c in &caps {
        t.add_row([c.name, if c.available { "yes" } else { "no" }, c.reason.as_str()]);
    }
    println!("{t}");
    for lib in &libraries {
        print_sites(lib);
    }
    Ok(())
}

fn print_sites(lib: &LibrarySites) {
    println!("\n{}: {} probe site(s): {}", lib.path, lib.sites.len(), lib.summary);
    let mut t = table(&["SYMBOL", "SITE", "HOW", "RET"], 1);
    for s in &lib.sites {
        let how =
            serde_json::to_value(s.how).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let ret = s.ret.map_or("none".to_string(), |r| format!("+{r}"));
        t.add_row([s.symbol.to_string(), format!("+{}", s.offset), how, ret]);
    }
    println!("{t}");
    if !lib.missing.is_empty() {
        println!("not exported: {}", lib.missing.join(", "));
    }
}
