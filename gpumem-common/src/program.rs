//! gpumem's uprobe programs, by name. The eBPF crate checks at compile
//! time that each program it defines is named here under the variant it
//! uses; the agent's tests check each one in the built object (that it
//! runs on its task's stack: gpumem-ebpf's `base/task_stack.rs`).

macro_rules! programs {
    ($($variant:ident $name:literal;)*) => {
        /// A uprobe program of the object.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Program {
            $(#[doc = $name] $variant,)*
        }

        impl Program {
            /// Every uprobe program.
            pub const ALL: &[Program] = &[$(Program::$variant,)*];

            /// The program's name in the object (its function's name).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Program::$variant => $name,)*
                }
            }
        }
    };
}

programs! {
    AllocEntry          "alloc_entry";
    AllocReturn         "alloc_return";
    CtxOutDev1Entry     "ctx_out_dev1_entry";
    CtxOutDev2Entry     "ctx_out_dev2_entry";
    CtxOutDev3Entry     "ctx_out_dev3_entry";
    CtxOutDev4Entry     "ctx_out_dev4_entry";
    CtxOutReturn        "ctx_out_return";
    CtxSetEntry         "ctx_set_entry";
    CtxSetReturn        "ctx_set_return";
    CtxPopEntry         "ctx_pop_entry";
    CtxPopReturn        "ctx_pop_return";
    FreeEntry           "free_entry";
    FreeTakeEntry       "free_take_entry";
    FreeReturn          "free_return";
    CallEntry           "call_entry";
    CallOutEntry        "call_out_entry";
    CallArgsEntry       "call_args_entry";
    CallReturn          "call_return";
    VmmReleaseEntry     "vmm_release_entry";
    VmmReleaseReturn    "vmm_release_return";
    VmmMapEntry         "vmm_map_entry";
    VmmMapReturn        "vmm_map_return";
    VmmUnmapEntry       "vmm_unmap_entry";
    VmmUnmapReturn      "vmm_unmap_return";
    VmmRetainReturn     "vmm_retain_return";
    PoolCreateEntry     "pool_create_entry";
    PoolOfLocationEntry "pool_of_location_entry";
    PoolOfDeviceEntry   "pool_of_device_entry";
    PoolLearnReturn     "pool_learn_return";
    MemInfoEntry        "mem_info_entry";
    TotalMemEntry       "total_mem_entry";
    ViewReturn          "view_return";
    NvmlHandleEntry     "nvml_handle_entry";
    NvmlHandleReturn    "nvml_handle_return";
    NvmlMemInfoEntry    "nvml_mem_info_entry";
}
