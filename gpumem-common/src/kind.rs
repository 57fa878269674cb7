//! Memory kinds, as charged.
/// Device memory (`cuMemAlloc*`, pools, async).
pub const DEVICE: u32 = 0;
/// Unified (managed) memory.
pub const MANAGED: u32 = 1;
/// Page-locked host memory.
pub const HOST: u32 = 2;
/// CUDA arrays and mipmapped arrays.
pub const ARRAY: u32 = 3;
/// Physical memory created through the virtual memory API (`cuMemCreate`).
pub const VMM: u32 = 4;
/// Contexts (reported, not charged: their cost is not visible at the call).
pub const CONTEXT: u32 = 5;
/// Number of kinds.
pub const COUNT: u32 = 6;

/// The kinds that live in a device's own memory (what the driver counts
/// as the device's used memory, and what can run a device out of it):
/// not managed memory (it lives where it is touched) nor pinned host
/// memory.
pub const ON_DEVICE: [u32; 3] = [DEVICE, ARRAY, VMM];

/// Whether `kind` lives in a device's own memory.
pub const fn on_device(kind: u32) -> bool {
    matches!(kind, DEVICE | ARRAY | VMM)
}

/// The name used in JSON and text output.
pub const fn name(kind: u32) -> &'static str {
    match kind {
        DEVICE => "device",
        MANAGED => "managed",
        HOST => "host",
        ARRAY => "array",
        VMM => "vmm",
        CONTEXT => "context",
        _ => "unknown",
    }
}
