//! The probe table: every driver symbol gpumem attaches to, the eBPF
//! programs that serve it, the API id and memory kind passed in the attach
//! cookie, and whether the agent refuses to run without it. This table is
//! the documentation of coverage; adding a symbol of a known shape is one
//! row.
use gpumem_common::{id, kind};

/// Whether a libcuda without this symbol can still be traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every libcuda gpumem supports exports it; missing means this is not
    /// a CUDA driver (or a far too old one): refuse.
    Required,
    /// Skipped, and listed once at start-up, when absent.
    Optional,
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub symbol: &'static str,
    pub family: Family,
    /// Program attached at the function entry.
    pub entry: &'static str,
    /// Program attached at the return.
    pub ret: &'static str,
    pub api: u32,
    pub kind: u32,
    pub need: Need,
}

const fn row(symbol: &'static str, family: Family, api: u32, kind: u32, need: Need) -> Probe {
    let (entry, ret) = family.programs();
    Probe { symbol, family, entry, ret, api, kind, need }
}

/// A context-making call whose device is argument `dev_arg`.
const fn ctx_row(symbol: &'static str, api: u32, dev_arg: u8) -> Probe {
    row(symbol, Family::CtxOut { dev_arg }, api, kind::CONTEXT, Need::Optional)
}

/// Argument shapes, each served by one entry/return program pair.
#[derive(Clone, Copy, Debug)]
pub enum Family {
    /// `(T **out, size_t bytes, ...)`: charged at a successful return.
    Alloc,
    /// `cuMemAllocPitch_v2`: charged pitch x rows, as returned.
    Pitch,
    /// `(void *p, size_t bytes, ...)`: the caller's memory, pinned.
    HostRegister,
    /// `cuMemCreate`: charged to the location's device (host locations as
    /// host memory).
    VmmCreate,
    /// `cuMemRelease`: uncharged now, or at the last unmap if still mapped.
    VmmRelease,
    /// `cuMemMap`, `cuMemUnmap`: counts mappings; never charged.
    VmmMap,
    VmmUnmap,
    /// Array creation, size from `CUDA_ARRAY_DESCRIPTOR`.
    Array,
    /// From `CUDA_ARRAY3D_DESCRIPTOR`.
    Array3D,
    /// From `CUDA_ARRAY3D_DESCRIPTOR` over the mipmap levels.
    Mipmap,
    /// Reported, never charged: `(handle, size, ...)`.
    Call,
    /// Reported, never charged: `(T *out, ...)`.
    CallOut,
    /// `(T addr, ...)`: uncharged at a successful return.
    Free,
    /// `(CUcontext *out, ..., CUdevice dev)`: learns the context's device;
    /// one entry program per position of `dev` (1 to 4).
    CtxOut {
        dev_arg: u8,
    },
    /// `(CUcontext ctx)`: the thread's current context.
    CtxSet,
    /// `cuCtxPopCurrent`: the thread's device becomes unknown.
    CtxPop,
}

impl Family {
    const fn programs(self) -> (&'static str, &'static str) {
        match self {
            Family::Alloc => ("alloc_entry", "alloc_return"),
            Family::Free => ("free_entry", "free_return"),
            Family::Pitch => ("pitch_entry", "alloc_return"),
            Family::HostRegister => ("host_register_entry", "alloc_return"),
            Family::VmmCreate => ("vmm_create_entry", "alloc_return"),
            Family::VmmRelease => ("vmm_release_entry", "vmm_release_return"),
            Family::VmmMap => ("vmm_map_entry", "vmm_map_return"),
            Family::VmmUnmap => ("vmm_unmap_entry", "vmm_unmap_return"),
            Family::Array => ("array_entry", "alloc_return"),
            Family::Array3D => ("array3d_entry", "alloc_return"),
            Family::Mipmap => ("mipmap_entry", "alloc_return"),
            Family::Call => ("call_entry", "call_return"),
            Family::CallOut => ("call_out_entry", "call_return"),
            Family::CtxOut { dev_arg: 1 } => ("ctx_out_dev1_entry", "ctx_out_return"),
            Family::CtxOut { dev_arg: 2 } => ("ctx_out_dev2_entry", "ctx_out_return"),
            Family::CtxOut { dev_arg: 3 } => ("ctx_out_dev3_entry", "ctx_out_return"),
            Family::CtxOut { dev_arg: _ } => ("ctx_out_dev4_entry", "ctx_out_return"),
            Family::CtxSet => ("ctx_set_entry", "ctx_set_return"),
            Family::CtxPop => ("ctx_pop_entry", "ctx_pop_return"),
        }
    }
}

use Family::*;
use Need::*;

/// Every probe, in attach order.
#[rustfmt::skip]
pub const PROBES: &[Probe] = &[
    // Device memory.
    row("cuMemAlloc_v2",                  Alloc,        id::MEM_ALLOC_V2,                     kind::DEVICE,  Required),
    row("cuMemFree_v2",                   Free,         id::MEM_FREE_V2,                      kind::DEVICE,  Required),
    row("cuMemAllocPitch_v2",             Pitch,        id::MEM_ALLOC_PITCH_V2,               kind::DEVICE,  Optional),
    row("cuMemAllocManaged",              Alloc,        id::MEM_ALLOC_MANAGED,                kind::MANAGED, Optional),
    // Stream-ordered allocation and pools: what the caller holds.
    row("cuMemAllocAsync",                Alloc,        id::MEM_ALLOC_ASYNC,                  kind::DEVICE,  Optional),
    row("cuMemAllocAsync_ptsz",           Alloc,        id::MEM_ALLOC_ASYNC_PTSZ,             kind::DEVICE,  Optional),
    row("cuMemAllocFromPoolAsync",        Alloc,        id::MEM_ALLOC_FROM_POOL_ASYNC,        kind::DEVICE,  Optional),
    row("cuMemAllocFromPoolAsync_ptsz",   Alloc,        id::MEM_ALLOC_FROM_POOL_ASYNC_PTSZ,   kind::DEVICE,  Optional),
    row("cuMemFreeAsync",                 Free,         id::MEM_FREE_ASYNC,                   kind::DEVICE,  Optional),
    row("cuMemFreeAsync_ptsz",            Free,         id::MEM_FREE_ASYNC_PTSZ,              kind::DEVICE,  Optional),
    row("cuMemPoolTrimTo",                Call,         id::MEM_POOL_TRIM_TO,                 kind::DEVICE,  Optional),
    row("cuMemPoolDestroy",               Call,         id::MEM_POOL_DESTROY,                 kind::DEVICE,  Optional),
    // Virtual memory management (PyTorch expandable segments, NCCL).
    row("cuMemCreate",                    VmmCreate,    id::MEM_CREATE,                       kind::VMM,     Optional),
    row("cuMemRelease",                   VmmRelease,   id::MEM_RELEASE,                      kind::VMM,     Optional),
    row("cuMemMap",                       VmmMap,       id::MEM_MAP,                          kind::VMM,     Optional),
    row("cuMemUnmap",                     VmmUnmap,     id::MEM_UNMAP,                        kind::VMM,     Optional),
    // Pinned host memory.
    row("cuMemAllocHost_v2",              Alloc,        id::MEM_ALLOC_HOST_V2,                kind::HOST,    Optional),
    row("cuMemHostAlloc",                 Alloc,        id::MEM_HOST_ALLOC,                   kind::HOST,    Optional),
    row("cuMemHostRegister_v2",           HostRegister, id::MEM_HOST_REGISTER_V2,             kind::HOST,    Optional),
    row("cuMemFreeHost",                  Free,         id::MEM_FREE_HOST,                    kind::HOST,    Optional),
    row("cuMemHostUnregister",            Free,         id::MEM_HOST_UNREGISTER,              kind::HOST,    Optional),
    // Arrays, sized from their descriptors.
    row("cuArrayCreate_v2",               Array,        id::ARRAY_CREATE_V2,                  kind::ARRAY,   Optional),
    row("cuArray3DCreate_v2",             Array3D,      id::ARRAY_3D_CREATE_V2,               kind::ARRAY,   Optional),
    row("cuMipmappedArrayCreate",         Mipmap,       id::MIPMAPPED_ARRAY_CREATE,           kind::ARRAY,   Optional),
    row("cuArrayDestroy",                 Free,         id::ARRAY_DESTROY,                    kind::ARRAY,   Optional),
    row("cuMipmappedArrayDestroy",        Free,         id::MIPMAPPED_ARRAY_DESTROY,          kind::ARRAY,   Optional),
    // Imports: reported; the memory stays charged to the exporter only.
    row("cuIpcOpenMemHandle_v2",          CallOut,      id::IPC_OPEN_MEM_HANDLE_V2,           kind::DEVICE,  Optional),
    row("cuMemImportFromShareableHandle", CallOut,      id::MEM_IMPORT_FROM_SHAREABLE_HANDLE, kind::VMM,     Optional),
    // Contexts: which device a thread's allocations land on, and their
    // lifecycle as records.
    ctx_row("cuDevicePrimaryCtxRetain",   id::DEVICE_PRIMARY_CTX_RETAIN, 1),
    ctx_row("cuCtxCreate",                id::CTX_CREATE,                2),
    ctx_row("cuCtxCreate_v2",             id::CTX_CREATE_V2,             2),
    ctx_row("cuCtxCreate_v3",             id::CTX_CREATE_V3,             4),
    ctx_row("cuCtxCreate_v4",             id::CTX_CREATE_V4,             3),
    row("cuCtxSetCurrent",                CtxSet,       id::CTX_SET_CURRENT,                  kind::CONTEXT, Optional),
    row("cuCtxPushCurrent_v2",            CtxSet,       id::CTX_PUSH_CURRENT_V2,              kind::CONTEXT, Optional),
    row("cuCtxPopCurrent_v2",             CtxPop,       id::CTX_POP_CURRENT_V2,               kind::CONTEXT, Optional),
    row("cuCtxDestroy_v2",                Call,         id::CTX_DESTROY_V2,                   kind::CONTEXT, Optional),
    row("cuDevicePrimaryCtxRelease",      Call,         id::DEVICE_PRIMARY_CTX_RELEASE,       kind::CONTEXT, Optional),
    row("cuDevicePrimaryCtxRelease_v2",   Call,         id::DEVICE_PRIMARY_CTX_RELEASE_V2,    kind::CONTEXT, Optional),
];

/// Raw tracepoints (program, tracepoint) that uncharge processes whose
/// driver state is gone: exit and exec.
pub const TRACEPOINTS: &[(&str, &str)] =
    &[("process_exit", "sched_process_exit"), ("process_exec", "sched_process_exec")];

/// Never attached: run by the agent for a process whose exit the kernel
/// skipped (see gpumem-ebpf's exit.rs).
pub const RELEASE_GONE: &str = "release_gone";

/// The empty programs `gpumem floor` attaches at the same sites (bench).
pub const FLOOR: (&str, &str) = ("floor_entry", "floor_return");

/// Names of every program in the object, each loaded once.
pub fn programs() -> Vec<&'static str> {
    let mut names: Vec<&'static str> =
        PROBES.iter().flat_map(|p| [p.entry, p.ret]).chain([FLOOR.0, FLOOR.1]).collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_is_listed_once_and_named_for_its_api() {
        let mut seen = std::collections::HashSet::new();
        for p in PROBES {
            assert!(seen.insert(p.symbol), "{} listed twice", p.symbol);
            assert_eq!(id::name(p.api), p.symbol, "api id of {} names another symbol", p.symbol);
        }
    }

    #[test]
    fn the_apis_that_reserve_under_limits_are_those_returning_through_alloc_return() {
        for p in PROBES {
            assert_eq!(
                id::reserves(p.api),
                p.ret == "alloc_return",
                "{}: id::reserves disagrees with its return program {}",
                p.symbol,
                p.ret
            );
        }
    }

    #[test]
    fn program_list_has_no_duplicates() {
        let names = programs();
        assert!(names.contains(&"alloc_entry") && names.contains(&"free_return"));
        let mut sorted = names.clone();
        sorted.dedup();
        assert_eq!(sorted, names);
    }
}
