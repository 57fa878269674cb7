//! The CUDA driver entry points gpumem probes: one table ([`APIS`]), from
//! which the API ids, their symbols, families, argument shapes and whether
//! a call reserves bytes under limits all come. The agent's probe table
//! (`gpumem-user/src/bpf/probes.rs`) is this table with each shape's
//! programs; the kernel's guard indexes come from [`crate::program`].
//! Adding a symbol of a shape gpumem knows is one row.
//!
//! An API id travels to the kernel in the uprobe's attach cookie (see
//! [`crate::cookie`]), so one eBPF program serves every entry point that
//! shares an argument shape.
mod shape;

pub use self::shape::Shape;
use crate::kind;
#[cfg(test)]
use crate::program::Program;

/// What a group of APIs does with memory. Calls that are reported but not
/// charged are named by their family in the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `cuMemAlloc*`, managed and pitched memory.
    Device,
    /// Stream-ordered allocation and memory pools.
    Pool,
    /// The virtual memory management API.
    Vmm,
    /// Page-locked host memory.
    Host,
    /// CUDA arrays.
    Array,
    /// Memory another process allocated, opened here (never charged).
    Import,
    /// Memory made shareable with other processes (never charged again).
    Export,
    /// Multicast objects (NVLink SHARP, as NCCL uses them): physical memory
    /// already charged at its `cuMemCreate`, bound to a multicast handle.
    Multicast,
    /// Contexts: which device a thread's allocations go to.
    Context,
    /// What the card says it has: queries, never recorded.
    Query,
}

impl Family {
    /// The `event` of a record of a reported (uncharged) call.
    pub const fn call_record(self) -> &'static str {
        match self {
            Family::Pool => "pool",
            Family::Import => "import",
            Family::Export => "export",
            Family::Multicast => "multicast",
            Family::Context => "context",
            Family::Host => "host_mapping",
            Family::Query => "query",
            _ => "call",
        }
    }
}

/// Whether a libcuda without a symbol can still be traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every libcuda gpumem supports exports it; missing means this is not
    /// a CUDA driver (or a far too old one): refuse.
    Required,
    /// Skipped, and listed once at start-up, when absent.
    Optional,
}

/// The library that exports an API: gpumem attaches each library's rows
/// to the files of that library it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Library {
    /// The CUDA driver, `libcuda.so*`.
    Cuda,
    /// NVIDIA's management library, `libnvidia-ml.so*`.
    Nvml,
}

impl Library {
    /// How the library's file names start.
    pub const fn file_prefix(self) -> &'static str {
        match self {
            Library::Cuda => "libcuda.so",
            Library::Nvml => "libnvidia-ml.so",
        }
    }
}

/// One driver entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Api {
    /// Stable: it appears in records, so never reuse one.
    pub id: u32,
    pub symbol: &'static str,
    pub library: Library,
    pub family: Family,
    pub shape: Shape,
    /// The memory kind the call charges (or reports).
    pub kind: u32,
    pub need: Need,
}

/// Generates [`id`] (a constant per API) and [`APIS`] from one list, in
/// sections by the library that exports the APIs.
macro_rules! apis {
    ($($library:ident { $($id:literal $name:ident $symbol:literal $family:ident $shape:ident $kind:ident $need:ident;)* })*) => {
        /// Driver entry points by id, generated from the table.
        pub mod id {
            /// No API (exit and exec records).
            pub const NONE: u32 = 0;
            $($(#[doc = $symbol] pub const $name: u32 = $id;)*)*
            /// The highest id: the kernel clears a dead thread's calls by id.
            pub const MAX: u32 = super::max_id(super::APIS);

            /// Whether a call to `api` reserves bytes under limits at its entry
            /// (see [`super::Shape::reserves`]); a dead thread's call of another
            /// API has nothing to give back.
            pub const fn reserves(api: u32) -> bool {
                api < 64 && (super::RESERVING >> api) & 1 == 1
            }

            /// The driver symbol for an id, or `"unknown"`.
            pub const fn name(api: u32) -> &'static str {
                match super::find(api) {
                    Some(a) => a.symbol,
                    None => "unknown",
                }
            }

            /// The `event` name of a reported call's record (see
            /// [`super::Family::call_record`]).
            pub const fn call_name(api: u32) -> &'static str {
                match super::find(api) {
                    Some(a) => a.family.call_record(),
                    None => "call",
                }
            }
        }

        /// Every API gpumem probes, in attach order.
        pub const APIS: &[Api] = &[
            $($(Api {
                id: $id,
                symbol: $symbol,
                library: Library::$library,
                family: Family::$family,
                shape: Shape::$shape,
                kind: kind::$kind,
                need: Need::$need,
            },)*)*
        ];
    };
}

apis! {
    // The CUDA driver, `libcuda.so.1`.
    Cuda {
    // id  constant                          symbol                            family   shape         kind     need
    // Device memory.
    1  MEM_ALLOC_V2                     "cuMemAlloc_v2"                   Device   Alloc         DEVICE   Required;
    2  MEM_FREE_V2                      "cuMemFree_v2"                    Device   Free          DEVICE   Required;
    11 MEM_ALLOC_PITCH_V2               "cuMemAllocPitch_v2"              Device   Pitch         DEVICE   Optional;
    12 MEM_ALLOC_MANAGED                "cuMemAllocManaged"               Device   Alloc         MANAGED  Optional;
    // Stream-ordered allocation and pools: what the caller holds.
    13 MEM_ALLOC_ASYNC                  "cuMemAllocAsync"                 Pool     Alloc         DEVICE   Optional;
    14 MEM_ALLOC_ASYNC_PTSZ             "cuMemAllocAsync_ptsz"            Pool     Alloc         DEVICE   Optional;
    15 MEM_ALLOC_FROM_POOL_ASYNC        "cuMemAllocFromPoolAsync"         Pool     PoolAlloc     DEVICE   Optional;
    16 MEM_ALLOC_FROM_POOL_ASYNC_PTSZ   "cuMemAllocFromPoolAsync_ptsz"    Pool     PoolAlloc     DEVICE   Optional;
    17 MEM_FREE_ASYNC                   "cuMemFreeAsync"                  Pool     FreeAtReturn  DEVICE   Optional;
    18 MEM_FREE_ASYNC_PTSZ              "cuMemFreeAsync_ptsz"             Pool     FreeAtReturn  DEVICE   Optional;
    19 MEM_POOL_TRIM_TO                 "cuMemPoolTrimTo"                 Pool     Call          DEVICE   Optional;
    20 MEM_POOL_DESTROY                 "cuMemPoolDestroy"                Pool     Call          DEVICE   Optional;
    // Where each pool is: a pool allocation's kind and device are its
    // pool's location (host pools hold host memory, managed pools managed).
    42 MEM_POOL_CREATE                  "cuMemPoolCreate"                 Pool     PoolCreate    DEVICE   Optional;
    43 MEM_GET_MEM_POOL                 "cuMemGetMemPool"                 Pool     PoolOfLocation DEVICE  Optional;
    44 MEM_GET_DEFAULT_MEM_POOL         "cuMemGetDefaultMemPool"          Pool     PoolOfLocation DEVICE  Optional;
    45 DEVICE_GET_MEM_POOL              "cuDeviceGetMemPool"              Pool     PoolOfDevice  DEVICE   Optional;
    46 DEVICE_GET_DEFAULT_MEM_POOL      "cuDeviceGetDefaultMemPool"       Pool     PoolOfDevice  DEVICE   Optional;
    // Virtual memory management (PyTorch expandable segments, NCCL).
    21 MEM_CREATE                       "cuMemCreate"                     Vmm      VmmCreate     VMM      Optional;
    22 MEM_RELEASE                      "cuMemRelease"                    Vmm      VmmRelease    VMM      Optional;
    23 MEM_MAP                          "cuMemMap"                        Vmm      VmmMap        VMM      Optional;
    24 MEM_UNMAP                        "cuMemUnmap"                      Vmm      VmmUnmap      VMM      Optional;
    47 MEM_RETAIN_ALLOCATION_HANDLE     "cuMemRetainAllocationHandle"     Vmm      VmmRetain     VMM      Optional;
    // Pinned host memory.
    26 MEM_ALLOC_HOST_V2                "cuMemAllocHost_v2"               Host     Alloc         HOST     Optional;
    27 MEM_HOST_ALLOC                   "cuMemHostAlloc"                  Host     Alloc         HOST     Optional;
    28 MEM_HOST_REGISTER_V2             "cuMemHostRegister_v2"            Host     HostRegister  HOST     Optional;
    29 MEM_FREE_HOST                    "cuMemFreeHost"                   Host     FreeAtReturn  HOST     Optional;
    30 MEM_HOST_UNREGISTER              "cuMemHostUnregister"             Host     FreeAtReturn  HOST     Optional;
    41 MEM_HOST_GET_DEVICE_POINTER_V2   "cuMemHostGetDevicePointer_v2"    Host     CallOut       HOST     Optional;
    // Arrays, sized from their descriptors.
    31 ARRAY_CREATE_V2                  "cuArrayCreate_v2"                Array    Array         ARRAY    Optional;
    32 ARRAY_3D_CREATE_V2               "cuArray3DCreate_v2"              Array    Array3D       ARRAY    Optional;
    33 MIPMAPPED_ARRAY_CREATE           "cuMipmappedArrayCreate"          Array    Mipmap        ARRAY    Optional;
    34 ARRAY_DESTROY                    "cuArrayDestroy"                  Array    FreeAtReturn  ARRAY    Optional;
    35 MIPMAPPED_ARRAY_DESTROY          "cuMipmappedArrayDestroy"         Array    FreeAtReturn  ARRAY    Optional;
    // Imports: reported; the memory stays charged to the exporter only.
    39 IPC_OPEN_MEM_HANDLE_V2           "cuIpcOpenMemHandle_v2"           Import   CallOut       DEVICE   Optional;
    40 MEM_IMPORT_FROM_SHAREABLE_HANDLE "cuMemImportFromShareableHandle"  Import   CallOut       VMM      Optional;
    // Exports: reported with the exported allocation's handle or address.
    53 MEM_EXPORT_TO_SHAREABLE_HANDLE   "cuMemExportToShareableHandle"    Export   CallArgs      VMM      Optional;
    54 IPC_GET_MEM_HANDLE               "cuIpcGetMemHandle"               Export   CallArgs      DEVICE   Optional;
    // Multicast objects: reported; what is bound to them is charged at its
    // cuMemCreate only.
    48 MULTICAST_CREATE                 "cuMulticastCreate"               Multicast CallArgs     VMM      Optional;
    49 MULTICAST_ADD_DEVICE             "cuMulticastAddDevice"            Multicast CallArgs     VMM      Optional;
    50 MULTICAST_BIND_MEM               "cuMulticastBindMem"              Multicast CallArgs     VMM      Optional;
    51 MULTICAST_BIND_ADDR              "cuMulticastBindAddr"             Multicast CallArgs     VMM      Optional;
    52 MULTICAST_UNBIND                 "cuMulticastUnbind"               Multicast CallArgs     VMM      Optional;
    // Contexts: which device a thread's allocations land on, and their
    // lifecycle as records.
    3  DEVICE_PRIMARY_CTX_RETAIN        "cuDevicePrimaryCtxRetain"        Context  CtxOut1       CONTEXT  Optional;
    4  CTX_CREATE                       "cuCtxCreate"                     Context  CtxOut2       CONTEXT  Optional;
    5  CTX_CREATE_V2                    "cuCtxCreate_v2"                  Context  CtxOut2       CONTEXT  Optional;
    6  CTX_CREATE_V3                    "cuCtxCreate_v3"                  Context  CtxOut4       CONTEXT  Optional;
    7  CTX_CREATE_V4                    "cuCtxCreate_v4"                  Context  CtxOut3       CONTEXT  Optional;
    8  CTX_SET_CURRENT                  "cuCtxSetCurrent"                 Context  CtxSet        CONTEXT  Optional;
    9  CTX_PUSH_CURRENT_V2              "cuCtxPushCurrent_v2"             Context  CtxSet        CONTEXT  Optional;
    10 CTX_POP_CURRENT_V2               "cuCtxPopCurrent_v2"              Context  CtxPop        CONTEXT  Optional;
    36 CTX_DESTROY_V2                   "cuCtxDestroy_v2"                 Context  Call          CONTEXT  Optional;
    37 DEVICE_PRIMARY_CTX_RELEASE       "cuDevicePrimaryCtxRelease"       Context  Call          CONTEXT  Optional;
    38 DEVICE_PRIMARY_CTX_RELEASE_V2    "cuDevicePrimaryCtxRelease_v2"    Context  Call          CONTEXT  Optional;
    // What the card has: a process under limits with view=limit is told
    // its limit as the card's size (attached where the kernel lets
    // programs write user memory).
    55 MEM_GET_INFO_V2                  "cuMemGetInfo_v2"                 Query    MemInfo       DEVICE   Optional;
    56 MEM_GET_INFO                     "cuMemGetInfo"                    Query    MemInfo       DEVICE   Optional;
    57 DEVICE_TOTAL_MEM_V2              "cuDeviceTotalMem_v2"             Query    TotalMem      DEVICE   Optional;
    58 DEVICE_TOTAL_MEM                 "cuDeviceTotalMem"                Query    TotalMem      DEVICE   Optional;
    }
    // NVIDIA's management library, `libnvidia-ml.so.1`, where vLLM and
    // others read the card's size: the same view, the device known by the
    // handle its index gave (attached with the CUDA queries, or not at all).
    Nvml {
    61 NVML_DEVICE_GET_HANDLE_BY_INDEX_V2 "nvmlDeviceGetHandleByIndex_v2" Query   NvmlHandle    DEVICE   Optional;
    62 NVML_DEVICE_GET_HANDLE_BY_INDEX  "nvmlDeviceGetHandleByIndex"      Query    NvmlHandle    DEVICE   Optional;
    59 NVML_DEVICE_GET_MEMORY_INFO_V2   "nvmlDeviceGetMemoryInfo_v2"      Query    NvmlMemInfo   DEVICE   Optional;
    60 NVML_DEVICE_GET_MEMORY_INFO      "nvmlDeviceGetMemoryInfo"         Query    NvmlMemInfo   DEVICE   Optional;
    }
}

/// The API with id `api`.
pub const fn find(api: u32) -> Option<&'static Api> {
    let mut i = 0;
    while i < APIS.len() {
        if APIS[i].id == api {
            return Some(&APIS[i]);
        }
        i += 1;
    }
    None
}

const fn max_id(apis: &[Api]) -> u32 {
    let (mut max, mut i) = (0, 0);
    while i < apis.len() {
        if apis[i].id > max {
            max = apis[i].id;
        }
        i += 1;
    }
    max
}

/// Bit `id` set for each API of `shape`: how a program serving several
/// shapes tells them apart from the API id in its cookie.
pub const fn ids_of(shape: Shape) -> u64 {
    let (mut mask, mut i) = (0u64, 0);
    while i < APIS.len() {
        if APIS[i].shape as u8 == shape as u8 {
            mask |= 1 << APIS[i].id;
        }
        i += 1;
    }
    mask
}

/// The one API of `shape`; a compile-time error where the shape has
/// none or several: what a program serving a single API relies on to
/// leave its cookie unread (`free_entry`, `cuMemFree_v2`'s).
pub const fn sole(shape: Shape) -> &'static Api {
    let (mut found, mut i): (Option<&'static Api>, usize) = (None, 0);
    while i < APIS.len() {
        if APIS[i].shape as u8 == shape as u8 {
            assert!(found.is_none(), "the shape has more than one API");
            found = Some(&APIS[i]);
        }
        i += 1;
    }
    match found {
        Some(a) => a,
        None => panic!("the shape has no API"),
    }
}

/// Whether bit `api` of `mask` (from [`ids_of`]) is set.
#[inline(always)]
pub const fn in_mask(api: u32, mask: u64) -> bool {
    api < 64 && (mask >> api) & 1 == 1
}

/// Bit `id` set for each API that reserves (see [`Shape::reserves`]).
const RESERVING: u64 = {
    let (mut mask, mut i) = (0u64, 0);
    while i < APIS.len() {
        if APIS[i].shape.reserves() {
            mask |= 1 << APIS[i].id;
        }
        i += 1;
    }
    mask
};

/// The table checked as it is compiled: ids unique, non-zero and below 64
/// (the reserving mask), symbols unique.
const _: () = {
    assert!(id::MAX < 64, "RESERVING holds ids below 64");
    let mut i = 0;
    while i < APIS.len() {
        assert!(APIS[i].id != id::NONE, "id 0 means no API");
        let mut j = i + 1;
        while j < APIS.len() {
            assert!(APIS[i].id != APIS[j].id, "two APIs share an id");
            assert!(!crate::text::str_eq(APIS[i].symbol, APIS[j].symbol), "a symbol is listed twice");
            j += 1;
        }
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_their_symbols_and_the_table_generates_the_rest() {
        assert_eq!(id::name(id::MEM_ALLOC_V2), "cuMemAlloc_v2");
        assert_eq!(id::name(id::CTX_CREATE_V4), "cuCtxCreate_v4");
        assert_eq!(id::name(9999), "unknown");
        assert_eq!(id::MAX, 62);
        assert_eq!(id::call_name(id::MEM_POOL_TRIM_TO), "pool");
        assert_eq!(id::call_name(id::CTX_DESTROY_V2), "context");
        assert_eq!(id::call_name(id::IPC_OPEN_MEM_HANDLE_V2), "import");
        assert_eq!(id::call_name(id::IPC_GET_MEM_HANDLE), "export");
        assert_eq!(id::call_name(id::MULTICAST_BIND_MEM), "multicast");
        assert_eq!(id::call_name(id::MEM_HOST_GET_DEVICE_POINTER_V2), "host_mapping");
        assert_eq!(id::call_name(9999), "call");
    }

    #[test]
    fn only_cu_mem_free_v2_is_final_at_its_entry() {
        // docs/traced.md says so: every other free may be
        // refused for live memory and is taken at its return.
        let mut at_entry = APIS.iter().filter(|a| a.shape == Shape::Free).map(|a| a.symbol);
        assert!(at_entry.next() == Some("cuMemFree_v2") && at_entry.next().is_none());
        assert!(APIS.iter().all(|a| a.shape.programs().1.is_some() || a.shape == Shape::Free));
    }

    #[test]
    fn exactly_the_shapes_returning_through_alloc_return_reserve() {
        for a in APIS {
            assert_eq!(
                id::reserves(a.id),
                a.shape.programs().1 == Some(Program::AllocReturn),
                "{}",
                a.symbol
            );
        }
        assert!(id::reserves(id::MEM_ALLOC_V2) && id::reserves(id::MEM_CREATE));
        assert!(!id::reserves(id::MEM_FREE_V2) && !id::reserves(id::NONE) && !id::reserves(200));
    }

    #[test]
    fn each_api_alloc_entry_serves_is_in_the_mask_of_its_own_shape_only() {
        let shapes = [
            Shape::Alloc,
            Shape::Pitch,
            Shape::HostRegister,
            Shape::VmmCreate,
            Shape::PoolAlloc,
            Shape::Array,
            Shape::Array3D,
            Shape::Mipmap,
        ];
        for a in APIS {
            let serves = a.shape.programs().0 == Program::AllocEntry;
            assert_eq!(serves, shapes.contains(&a.shape), "{}", a.symbol);
            for s in shapes {
                assert_eq!(in_mask(a.id, ids_of(s)), a.shape == s, "{} in {s:?}'s mask", a.symbol);
            }
        }
        assert!(in_mask(id::MEM_ALLOC_PITCH_V2, ids_of(Shape::Pitch)));
        assert!(!in_mask(64, u64::MAX) && !in_mask(200, u64::MAX));
    }
}
