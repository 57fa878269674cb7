//! CUDA driver API identifiers and memory kinds.
//!
//! An API id travels to the kernel as the low 32 bits of the uprobe's attach
//! cookie, so one eBPF program serves every entry point that shares an
//! argument layout; the kernel reads the memory kind from the same cookie
//! (bits 32..40). The user-space probe table (`gpumem-user/src/bpf/probes.rs`)
//! is the single list of which symbol gets which id.

/// Memory kinds, as charged.
pub mod kind {
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
}

/// Driver entry points gpumem knows, by id. Ids are stable: they appear in
/// records, so never reuse one.
pub mod id {
    pub const NONE: u32 = 0;
    pub const MEM_ALLOC_V2: u32 = 1;
    pub const MEM_FREE_V2: u32 = 2;
    pub const DEVICE_PRIMARY_CTX_RETAIN: u32 = 3;
    pub const CTX_CREATE: u32 = 4;
    pub const CTX_CREATE_V2: u32 = 5;
    pub const CTX_CREATE_V3: u32 = 6;
    pub const CTX_CREATE_V4: u32 = 7;
    pub const CTX_SET_CURRENT: u32 = 8;
    pub const CTX_PUSH_CURRENT_V2: u32 = 9;
    pub const CTX_POP_CURRENT_V2: u32 = 10;

    /// Every id with its driver symbol. The probe table refers to these.
    pub const NAMES: &[(u32, &str)] = &[
        (MEM_ALLOC_V2, "cuMemAlloc_v2"),
        (MEM_FREE_V2, "cuMemFree_v2"),
        (DEVICE_PRIMARY_CTX_RETAIN, "cuDevicePrimaryCtxRetain"),
        (CTX_CREATE, "cuCtxCreate"),
        (CTX_CREATE_V2, "cuCtxCreate_v2"),
        (CTX_CREATE_V3, "cuCtxCreate_v3"),
        (CTX_CREATE_V4, "cuCtxCreate_v4"),
        (CTX_SET_CURRENT, "cuCtxSetCurrent"),
        (CTX_PUSH_CURRENT_V2, "cuCtxPushCurrent_v2"),
        (CTX_POP_CURRENT_V2, "cuCtxPopCurrent_v2"),
    ];

    /// The driver symbol for an id, or `"unknown"`.
    pub fn name(api: u32) -> &'static str {
        let mut i = 0;
        while i < NAMES.len() {
            if NAMES[i].0 == api {
                return NAMES[i].1;
            }
            i += 1;
        }
        "unknown"
    }
}

/// Packs an API id and a memory kind into a uprobe attach cookie.
pub const fn cookie(api: u32, kind: u32) -> u64 {
    (api as u64) | (((kind & 0xff) as u64) << 32)
}

/// The API id in a cookie.
pub const fn cookie_api(cookie: u64) -> u32 {
    cookie as u32
}

/// The memory kind in a cookie.
pub const fn cookie_kind(cookie: u64) -> u32 {
    ((cookie >> 32) & 0xff) as u32
}
