//! Loading the eBPF object with this agent's settings (`Options`, from the
//! command line): the read-only data the programs branch on (deny, task
//! storage, where the task's comm is, the build's tag, the log level), the
//! ring buffer's size, and every map pinned where `--persist` keeps them
//! (reused where an earlier agent pinned them); the costliest maps made while
//! aya's loader starts (`early_map`).
use aya::{Ebpf, EbpfError, EbpfLoader};

use super::{early_map::EarlyMaps, log, multi::LinkMode, persist::Pins};

/// How the object is loaded.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Limits with action deny make refused calls return
    /// `CUDA_ERROR_OUT_OF_MEMORY` (only where
    /// [`super::Tracer::register_write_refusal`] said None: elsewhere the
    /// programs do not load).
    pub deny_by_registers: bool,
    /// The ring buffer's size (a power of two, checked by the command line).
    pub ring_bytes: u32,
    /// Load the object whose programs log their decisions (`--bpf-log`);
    /// the other has no logging compiled in.
    pub bpf_log: bool,
    /// How uprobes are linked (`--uprobe-links`).
    pub links: LinkMode,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            deny_by_registers: false,
            ring_bytes: gpumem_common::EVENTS_BYTES,
            bpf_log: false,
            links: LinkMode::default(),
        }
    }
}

/// What the object is loaded with.
pub struct Settings {
    pub options: Options,
    /// Calls in flight go to task storage (see `task_calls`).
    pub task_calls: bool,
    /// The build's tag (`persist::tag`).
    pub build: u32,
    /// The live table places a key's first slot by region (else as the
    /// layout before did: `takeover::table_slots_by_region`).
    pub slots_by_region: bool,
}

/// Creates (or opens, where pinned) the maps and readies the programs of
/// `object`; the programs are verified later (`Tracer::load_programs`).
pub fn load(
    object: &[u8],
    s: &Settings,
    pins: Option<&Pins>,
    maps: &[&'static str],
) -> Result<Ebpf, EbpfError> {
    let deny = u8::from(s.options.deny_by_registers);
    let task_calls = u8::from(s.task_calls);
    // 0: the programs read the comm through the helper. Where task
    // storage is off the kernel may have no BTF (or `GPUMEM_TASK_CALLS=off`
    // runs that fallback on purpose): the helper then too.
    let comm = if s.task_calls { super::btf_offset::task_comm().unwrap_or(0) } else { 0 };
    // The same for the thread's pid and tgid, and its cgroup (base/task.rs).
    let (pid, tgid) = s.task_calls.then(super::btf_offset::task_pid_tgid).flatten().unwrap_or((0, 0));
    let cgroup_path = s.task_calls.then(super::btf_offset::task_cgroup_path).flatten().unwrap_or([0; 4]);
    crate::start_phases::done("the pins (with --persist), the task's fields read from the kernel's BTF");
    let live_mask = live_slots_for_a_test(pins.is_some()) - 1;
    let by_region = u8::from(s.slots_by_region);
    // Made on a thread of their own while aya's loader parses the
    // kernel's BTF (not `PENDING` where a test sets its size).
    let overridden = pending_entries_for_a_test();
    let early_names: Vec<&'static str> = super::early_map::EARLY
        .iter()
        .copied()
        .filter(|&n| !(n == "PENDING" && overridden.is_some()))
        .collect();
    let pinned_at = |name: &'static str| pins.filter(|_| maps.contains(&name)).map(|p| p.map(name));
    let early = EarlyMaps::start(object, &early_names, pinned_at);
    let mut loader = EbpfLoader::new();
    crate::start_phases::done("aya's loader (it parses the kernel's BTF)");
    loader
        // TASK_CALLS: aya has no type for task storage, and needs none
        // (the programs alone use it; the agent only pins it).
        .allow_unsupported_maps()
        .override_global("DENY_BY_REGISTERS", &deny, true)
        .override_global("TASK_CALLS_ON", &task_calls, true)
        .override_global("TASK_COMM_OFFSET", &comm, true)
        .override_global("TASK_PID_OFFSET", &pid, true)
        .override_global("TASK_TGID_OFFSET", &tgid, true)
        .override_global("TASK_CGROUP_PATH", &cgroup_path, true)
        .override_global("BUILD", &s.build, true)
        .override_global("LIVE_MASK", &live_mask, true)
        .override_global("LIVE_SLOTS_BY_REGION", &by_region, true)
        .map_max_entries(gpumem_common::map_name::EVENTS, s.options.ring_bytes);
    if s.options.bpf_log {
        loader.override_global(aya_log::LEVEL, &log::LEVEL, true);
    }
    if let Some(entries) = overridden {
        loader.map_max_entries("PENDING", entries);
    }
    if let Some(pins) = pins {
        for &name in maps {
            loader.map_pin_path(name, pins.map(name));
        }
    }
    let pinned = early.map(|e| e.hand_to(&mut loader));
    let loaded = loader.load(object);
    if let Some(pinned) = pinned {
        pinned.remove();
    }
    crate::start_phases::done("aya's load (the object's BTF, the maps)");
    loaded
}

/// A testing aid: `GPUMEM_PENDING_ENTRIES=N` in the agent's environment
/// makes the calls-in-flight hash map (`PENDING`) that small, so that a
/// test sees what the programs do when it is full (16,384 threads inside
/// reserving calls at once, otherwise).
fn pending_entries_for_a_test() -> Option<u32> {
    std::env::var("GPUMEM_PENDING_ENTRIES").ok()?.parse().ok().filter(|&n| n > 0)
}

/// A testing aid: `GPUMEM_LIVE_SLOTS=N` (a power of two from
/// `LIVE_PROBES` to `LIVE_SLOTS`) makes the programs use only the live
/// table's first N slots, so that a test sees allocations go to `LIVE`
/// when a key's slots are taken (4 of 65,536 otherwise).
/// Not with `--persist` (`pinned`): the next agent would look in other
/// slots.
fn live_slots_for_a_test(pinned: bool) -> u32 {
    use gpumem_common::{LIVE_PROBES, LIVE_SLOTS};
    let Ok(v) = std::env::var("GPUMEM_LIVE_SLOTS") else { return LIVE_SLOTS };
    if pinned {
        tracing::warn!("GPUMEM_LIVE_SLOTS is a testing aid, ignored with --persist: the whole table is used");
        return LIVE_SLOTS;
    }
    match v.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && (LIVE_PROBES..=LIVE_SLOTS).contains(&n) => n,
        _ => {
            tracing::warn!(
                "GPUMEM_LIVE_SLOTS={v:?} is not a power of two from {LIVE_PROBES} to {LIVE_SLOTS}: the whole table is used"
            );
            LIVE_SLOTS
        }
    }
}
