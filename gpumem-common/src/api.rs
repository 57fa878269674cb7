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
    pub const MEM_ALLOC_PITCH_V2: u32 = 11;
    pub const MEM_ALLOC_MANAGED: u32 = 12;
    pub const MEM_ALLOC_ASYNC: u32 = 13;
    pub const MEM_ALLOC_ASYNC_PTSZ: u32 = 14;
    pub const MEM_ALLOC_FROM_POOL_ASYNC: u32 = 15;
    pub const MEM_ALLOC_FROM_POOL_ASYNC_PTSZ: u32 = 16;
    pub const MEM_FREE_ASYNC: u32 = 17;
    pub const MEM_FREE_ASYNC_PTSZ: u32 = 18;
    pub const MEM_POOL_TRIM_TO: u32 = 19;
    pub const MEM_POOL_DESTROY: u32 = 20;
    pub const MEM_CREATE: u32 = 21;
    pub const MEM_RELEASE: u32 = 22;
    pub const MEM_MAP: u32 = 23;
    pub const MEM_UNMAP: u32 = 24;
    pub const MEM_ALLOC_HOST_V2: u32 = 26;
    pub const MEM_HOST_ALLOC: u32 = 27;
    pub const MEM_HOST_REGISTER_V2: u32 = 28;
    pub const MEM_FREE_HOST: u32 = 29;
    pub const MEM_HOST_UNREGISTER: u32 = 30;
    pub const ARRAY_CREATE_V2: u32 = 31;
    pub const ARRAY_3D_CREATE_V2: u32 = 32;
    pub const MIPMAPPED_ARRAY_CREATE: u32 = 33;
    pub const ARRAY_DESTROY: u32 = 34;
    pub const MIPMAPPED_ARRAY_DESTROY: u32 = 35;
    pub const CTX_DESTROY_V2: u32 = 36;
    pub const DEVICE_PRIMARY_CTX_RELEASE: u32 = 37;
    pub const DEVICE_PRIMARY_CTX_RELEASE_V2: u32 = 38;
    pub const IPC_OPEN_MEM_HANDLE_V2: u32 = 39;
    pub const MEM_IMPORT_FROM_SHAREABLE_HANDLE: u32 = 40;
    /// The highest id: the kernel clears a dead thread's pending calls by id.
    pub const MAX: u32 = 40;

    /// Whether a call to `api` reserves bytes under limits at its entry
    /// (the allocating calls, those returning through `alloc_return`): a
    /// dead thread's pending call of another API has nothing to give back,
    /// and the kernel's thread-exit program skips that work for it.
    pub const fn reserves(api: u32) -> bool {
        matches!(
            api,
            MEM_ALLOC_V2
                | MEM_ALLOC_PITCH_V2
                | MEM_ALLOC_MANAGED
                | MEM_ALLOC_ASYNC
                | MEM_ALLOC_ASYNC_PTSZ
                | MEM_ALLOC_FROM_POOL_ASYNC
                | MEM_ALLOC_FROM_POOL_ASYNC_PTSZ
                | MEM_CREATE
                | MEM_ALLOC_HOST_V2
                | MEM_HOST_ALLOC
                | MEM_HOST_REGISTER_V2
                | ARRAY_CREATE_V2
                | ARRAY_3D_CREATE_V2
                | MIPMAPPED_ARRAY_CREATE
        )
    }

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
        (MEM_ALLOC_PITCH_V2, "cuMemAllocPitch_v2"),
        (MEM_ALLOC_MANAGED, "cuMemAllocManaged"),
        (MEM_ALLOC_ASYNC, "cuMemAllocAsync"),
        (MEM_ALLOC_ASYNC_PTSZ, "cuMemAllocAsync_ptsz"),
        (MEM_ALLOC_FROM_POOL_ASYNC, "cuMemAllocFromPoolAsync"),
        (MEM_ALLOC_FROM_POOL_ASYNC_PTSZ, "cuMemAllocFromPoolAsync_ptsz"),
        (MEM_FREE_ASYNC, "cuMemFreeAsync"),
        (MEM_FREE_ASYNC_PTSZ, "cuMemFreeAsync_ptsz"),
        (MEM_POOL_TRIM_TO, "cuMemPoolTrimTo"),
        (MEM_POOL_DESTROY, "cuMemPoolDestroy"),
        (MEM_CREATE, "cuMemCreate"),
        (MEM_RELEASE, "cuMemRelease"),
        (MEM_MAP, "cuMemMap"),
        (MEM_UNMAP, "cuMemUnmap"),
        (MEM_ALLOC_HOST_V2, "cuMemAllocHost_v2"),
        (MEM_HOST_ALLOC, "cuMemHostAlloc"),
        (MEM_HOST_REGISTER_V2, "cuMemHostRegister_v2"),
        (MEM_FREE_HOST, "cuMemFreeHost"),
        (MEM_HOST_UNREGISTER, "cuMemHostUnregister"),
        (ARRAY_CREATE_V2, "cuArrayCreate_v2"),
        (ARRAY_3D_CREATE_V2, "cuArray3DCreate_v2"),
        (MIPMAPPED_ARRAY_CREATE, "cuMipmappedArrayCreate"),
        (ARRAY_DESTROY, "cuArrayDestroy"),
        (MIPMAPPED_ARRAY_DESTROY, "cuMipmappedArrayDestroy"),
        (CTX_DESTROY_V2, "cuCtxDestroy_v2"),
        (DEVICE_PRIMARY_CTX_RELEASE, "cuDevicePrimaryCtxRelease"),
        (DEVICE_PRIMARY_CTX_RELEASE_V2, "cuDevicePrimaryCtxRelease_v2"),
        (IPC_OPEN_MEM_HANDLE_V2, "cuIpcOpenMemHandle_v2"),
        (MEM_IMPORT_FROM_SHAREABLE_HANDLE, "cuMemImportFromShareableHandle"),
    ];

    /// The name of the `call` record an API id produces: what the call
    /// did, for calls that are reported but not charged.
    pub fn call_name(api: u32) -> &'static str {
        match api {
            DEVICE_PRIMARY_CTX_RETAIN..=CTX_CREATE_V4 | CTX_DESTROY_V2..=DEVICE_PRIMARY_CTX_RELEASE_V2 => {
                "context"
            }
            MEM_POOL_TRIM_TO | MEM_POOL_DESTROY => "pool",
            IPC_OPEN_MEM_HANDLE_V2 | MEM_IMPORT_FROM_SHAREABLE_HANDLE => "import",
            _ => "call",
        }
    }

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

/// The largest distance from a function to a `ret` a cookie carries.
pub const MAX_RET_DELTA: u32 = (1 << 24) - 1;

/// [`cookie`], with the distance from the probed function's first byte to
/// a `ret` instruction (a 0xC3 byte) after it, what `deny` jumps to; 0
/// (or more than [`MAX_RET_DELTA`]) for none.
pub const fn cookie_with_ret(api: u32, kind: u32, ret_delta: u32) -> u64 {
    let delta = if ret_delta > MAX_RET_DELTA { 0 } else { ret_delta };
    cookie(api, kind) | ((delta as u64) << 40)
}

/// The distance to a `ret` in a cookie, or 0.
pub const fn cookie_ret_delta(cookie: u64) -> u32 {
    (cookie >> 40) as u32
}

/// CUDA array formats (`CUarray_format`) and the bytes of one channel.
pub mod array {
    /// Bytes per channel of `format`, or 0 when gpumem does not know the
    /// format (the array is then reported with size 0). Looked up in a
    /// bit table rather than matched, to keep the entry programs free of
    /// branches (see [`bytes`]).
    pub const fn format_bytes(format: u32) -> u64 {
        // 2 bits per format code below 64: 0 unknown, else log2(bytes) + 1.
        const fn table(formats: &[(u32, u64)], base: u32) -> u64 {
            let mut t = 0u64;
            let mut i = 0;
            while i < formats.len() {
                let (f, code) = formats[i];
                if f >= base && f < base + 32 {
                    t |= code << ((f - base) * 2);
                }
                i += 1;
            }
            t
        }
        const FORMATS: &[(u32, u64)] = &[
            (0x01, 1), // UNSIGNED_INT8
            (0x08, 1), // SIGNED_INT8
            (0x02, 2), // UNSIGNED_INT16
            (0x09, 2), // SIGNED_INT16
            (0x10, 2), // HALF
            (0x03, 3), // UNSIGNED_INT32
            (0x0a, 3), // SIGNED_INT32
            (0x20, 3), // FLOAT
        ];
        const LOW: u64 = table(FORMATS, 0);
        const HIGH: u64 = table(FORMATS, 32);
        let f = format as u64;
        let below_64 = (f.wrapping_sub(64) >> 63).wrapping_neg();
        let high = ((f >> 5) & 1).wrapping_neg();
        let shift = (f & 31) * 2;
        let code = (((LOW >> shift) & 3 & !high) | ((HIGH >> shift) & 3 & high)) & below_64;
        (1u64 << code) >> 1
    }

    /// Mipmap levels counted at most (a 64-bit dimension halves to 1 well
    /// before; more levels add 1-texel levels gpumem does not chase).
    pub const MAX_LEVELS: u32 = 16;

    /// The descriptor's size in bytes: width x height x depth x channel
    /// bytes x channels, zero dimensions counting as 1 (as the driver
    /// treats them), summed over `levels` mipmap levels (each halving every
    /// dimension, at least 1; at most [`MAX_LEVELS`]).
    ///
    /// Branch-free: the eBPF verifier walks every path through an entry
    /// program separately, and the branches of a level loop multiplied its
    /// work (and the agent's start-up) several times over.
    pub const fn bytes(width: u64, height: u64, depth: u64, format: u32, channels: u32, levels: u32) -> u64 {
        let per = format_bytes(format) * channels as u64;
        let (mut w, mut h, mut d) = (max1(width), max1(height), max1(depth));
        let mut total = 0u64;
        // Bit `l` set for each level `l` counted: a mask computed once,
        // rather than a comparison with `levels` in every round (which the
        // compiler turns into a branch for the verifier to split on).
        let levels = if levels > MAX_LEVELS { MAX_LEVELS } else { levels };
        let counted = (1u64 << levels) - 1;
        let mut level = 0;
        while level < MAX_LEVELS {
            // All ones while `level < levels`, else 0.
            let take = ((counted >> level) & 1).wrapping_neg();
            total = total.wrapping_add(mul(mul(mul(w, h), d), per) & take);
            w = max1(w >> 1);
            h = max1(h >> 1);
            d = max1(d >> 1);
            level += 1;
        }
        total
    }

    /// `a * b`, wrapping. Any overflow check (`saturating_mul`, or a
    /// division test, which LLVM recognises as one) compiles to a 128-bit
    /// multiply the BPF backend does not have; a size that overflows 64 bits
    /// cannot be allocated by the driver, whose failure is then reported.
    pub const fn mul(a: u64, b: u64) -> u64 {
        a.wrapping_mul(b)
    }

    /// `v`, or 1 for 0, without a branch: `(v - 1) & !v` has its top bit
    /// set only for 0.
    const fn max1(v: u64) -> u64 {
        v | ((v.wrapping_sub(1) & !v) >> 63)
    }
}

#[cfg(test)]
mod tests {
    use super::array::{bytes, mul};

    #[test]
    fn array_sizes_from_descriptors() {
        // 1024 x 768 float4: 12 MiB.
        assert_eq!(bytes(1024, 768, 0, 0x20, 4, 1), 1024 * 768 * 16);
        // 1D array of 100 bytes: height and depth 0 count as 1.
        assert_eq!(bytes(100, 0, 0, 0x01, 1, 1), 100);
        // 3D half2 volume.
        assert_eq!(bytes(64, 32, 8, 0x10, 2, 1), 64 * 32 * 8 * 4);
        // Mipmaps: 8x8 + 4x4 + 2x2 + 1x1 of uint8.
        assert_eq!(bytes(8, 8, 0, 0x01, 1, 4), 64 + 16 + 4 + 1);
        // Unknown formats are reported with size 0, never guessed.
        assert_eq!(bytes(8, 8, 0, 0xb0, 1, 1), 0);
        assert_eq!(bytes(8, 8, 0, 0x60, 1, 1), 0);
        assert_eq!(mul(3, 5), 15);
        // Levels beyond the halving to 1 add 1-texel levels, up to the cap.
        assert_eq!(bytes(2, 0, 0, 0x01, 1, 4), 2 + 1 + 1 + 1);
        assert_eq!(bytes(1, 1, 1, 0x01, 1, 100), u64::from(super::array::MAX_LEVELS));
        assert_eq!(bytes(u64::MAX, 1, 1, 0x01, 1, 1), u64::MAX);
        assert_eq!(bytes(8, 8, 0, 0x01, 1, 0), 0);
    }

    #[test]
    fn format_bytes_knows_exactly_the_cuda_array_formats() {
        let known = [(0x01, 1), (0x08, 1), (0x02, 2), (0x09, 2), (0x10, 2), (0x03, 4), (0x0a, 4), (0x20, 4)];
        for f in 0..=300u32 {
            let want = known.iter().find(|(k, _)| *k == f).map_or(0, |(_, b)| *b);
            assert_eq!(super::array::format_bytes(f), want, "format {f:#x}");
        }
        assert_eq!(super::array::format_bytes(u32::MAX), 0);
    }

    #[test]
    fn every_named_id_is_at_most_max() {
        let highest = super::id::NAMES.iter().map(|(id, _)| *id).max().unwrap();
        assert_eq!(
            highest,
            super::id::MAX,
            "raise id::MAX with a new id: dead threads' calls are cleared up to it"
        );
    }

    #[test]
    fn a_cookie_carries_api_kind_and_the_distance_to_a_ret() {
        let c = super::cookie_with_ret(7, 3, 0x1234);
        assert_eq!((super::cookie_api(c), super::cookie_kind(c), super::cookie_ret_delta(c)), (7, 3, 0x1234));
        let too_far = super::cookie_with_ret(7, 3, super::MAX_RET_DELTA + 1);
        assert_eq!(super::cookie_ret_delta(too_far), 0, "too far to carry: none");
    }
}
