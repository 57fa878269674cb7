//! Diagnostics an operator turns on when something looks wrong (`gpumem
//! run --bpf-log`): limit decisions, deny rewrites, memory queries
//! answered with a limit's view and full maps, logged from the programs through aya-log's ring buffer.
//!
//! The object is built twice (see gpumem-user's build.rs): without the
//! `log` feature every log call here is empty, and that object is what the
//! agent loads unless `--bpf-log` asks for the one built with it. So
//! logging off costs exactly nothing: the programs, the instructions the
//! verifier processes and their stack are those of an object without
//! logging. (A read-only flag the verifier prunes was measured first: each
//! gate is still a load and a branch on every path the verifier walks,
//! 159k -> 167k instructions processed with the flag off, and the log
//! statements' stack slots stay in every program.)
//!
//! In the logging object each kind of line is written by a global function
//! (`gpumem_log_*`, not inlined, scalar arguments): the kernel verifies it
//! once, on its own, instead of along every path of every program that
//! logs: 395k instructions processed for the whole logging object, where
//! aya-log's code inlined at each call made it 3.0M (the allocation
//! entries 30x costlier), too slow to start under emulation.
use gpumem_common::Decision;

/// A limit's decision (`event`: `limit` or `limit_soft`).
#[inline(always)]
pub fn decision(event: u32, d: &Decision) {
    #[cfg(feature = "log")]
    gpumem_log_decision(
        u64::from(d.slot) | (u64::from(event) << 32),
        d.request,
        d.usage,
        d.limit,
        u64::from(d.action),
    );
    #[cfg(not(feature = "log"))]
    let _ = (event, d);
}

/// A deny rewrite: the call returns `result` from the `ret` `delta` bytes on.
#[inline(always)]
pub fn deny(result: u32, delta: u64) {
    #[cfg(feature = "log")]
    gpumem_log_deny(u64::from(result), delta);
    #[cfg(not(feature = "log"))]
    let _ = (result, delta);
}

/// A memory query answered with a limit's view: `limit` as the total,
/// `left` as the free figure.
#[inline(always)]
pub fn view(api: u32, device: u32, limit: u64, left: u64) {
    #[cfg(feature = "log")]
    gpumem_log_view(u64::from(api), u64::from(device), limit, left);
    #[cfg(not(feature = "log"))]
    let _ = (api, device, limit, left);
}

/// A map insert failed: the map is full.
#[inline(always)]
pub fn map_full() {
    #[cfg(feature = "log")]
    gpumem_log_map_full();
}

/// The names are in the format strings, one line per case, not passed as
/// string arguments: aya-log copies those with a call to `memcpy`, a
/// third frame on the allocation entry's stack that with its own passed
/// the 512 bytes kernels allow the chain (6.1: "combined stack size of 3
/// calls is 544").
#[cfg(feature = "log")]
#[inline(never)]
#[no_mangle]
extern "C" fn gpumem_log_decision(slot_event: u64, request: u64, usage: u64, limit: u64, action: u64) -> u64 {
    use gpumem_common::{event_type, limit_action};
    let slot = slot_event as u32;
    let hard = (slot_event >> 32) as u32 == event_type::LIMIT;
    // One literal per case: aya-log takes only a literal format string.
    match (hard, action as u32) {
        (true, limit_action::AUDIT) => aya_log_ebpf::info!(
            &(),
            "limit slot {}: {} bytes asked with {} counted cross {} (hard): action audit",
            slot,
            request,
            usage,
            limit
        ),
        (true, limit_action::SIGNAL) => aya_log_ebpf::info!(
            &(),
            "limit slot {}: {} bytes asked with {} counted cross {} (hard): action signal",
            slot,
            request,
            usage,
            limit
        ),
        (true, _) => aya_log_ebpf::info!(
            &(),
            "limit slot {}: {} bytes asked with {} counted cross {} (hard): action deny",
            slot,
            request,
            usage,
            limit
        ),
        (false, limit_action::AUDIT) => aya_log_ebpf::info!(
            &(),
            "limit slot {}: {} bytes asked with {} counted cross {} (soft): action audit",
            slot,
            request,
            usage,
            limit
        ),
        (false, limit_action::SIGNAL) => aya_log_ebpf::info!(
            &(),
            "limit slot {}: {} bytes asked with {} counted cross {} (soft): action signal",
            slot,
            request,
            usage,
            limit
        ),
        (false, _) => aya_log_ebpf::info!(
            &(),
            "limit slot {}: {} bytes asked with {} counted cross {} (soft): action deny",
            slot,
            request,
            usage,
            limit
        ),
    }
    0
}

#[cfg(feature = "log")]
#[inline(never)]
#[no_mangle]
extern "C" fn gpumem_log_deny(result: u64, delta: u64) -> u64 {
    aya_log_ebpf::info!(&(), "deny: the call returns {} from the ret {} bytes on", result, delta);
    0
}

#[cfg(feature = "log")]
#[inline(never)]
#[no_mangle]
extern "C" fn gpumem_log_view(api: u64, device: u64, limit: u64, left: u64) -> u64 {
    // A match on constants, as the decision's action: the table lookup
    // (`id::name`) is a loop the verifier cannot follow here.
    use gpumem_common::id;
    let name = match api as u32 {
        id::MEM_GET_INFO_V2 => "cuMemGetInfo_v2",
        id::MEM_GET_INFO => "cuMemGetInfo",
        id::DEVICE_TOTAL_MEM_V2 => "cuDeviceTotalMem_v2",
        id::DEVICE_TOTAL_MEM => "cuDeviceTotalMem",
        id::NVML_DEVICE_GET_MEMORY_INFO_V2 => "nvmlDeviceGetMemoryInfo_v2",
        _ => "nvmlDeviceGetMemoryInfo",
    };
    aya_log_ebpf::info!(
        &(),
        "view: {} on device {} answered total {} free at most {}",
        name,
        device,
        limit,
        left
    );
    0
}

#[cfg(feature = "log")]
#[inline(never)]
#[no_mangle]
extern "C" fn gpumem_log_map_full() -> u64 {
    aya_log_ebpf::warn!(&(), "a map is full: an insert failed, this call's accounting is incomplete");
    0
}
