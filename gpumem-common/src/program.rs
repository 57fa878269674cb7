//! gpumem's uprobe programs, by name, with the index of each one's run
//! guard (gpumem-ebpf's `guard.rs`): the guard map has one entry per
//! program, checked below as this table is compiled, so no two programs
//! can share a guard. The eBPF crate checks at compile time that each
//! program it defines is named here under the variant it uses.
use crate::maps::GUARDED_PROGRAMS;

macro_rules! programs {
    ($($variant:ident $name:literal;)*) => {
        /// A uprobe program of the object; its discriminant is its guard's index.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Program {
            $(#[doc = $name] $variant,)*
        }

        impl Program {
            /// Every guarded program, in guard order.
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
    PitchEntry          "pitch_entry";
    HostRegisterEntry   "host_register_entry";
    AllocReturn         "alloc_return";
    ArrayEntry          "array_entry";
    Array3dEntry        "array3d_entry";
    MipmapEntry         "mipmap_entry";
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
    FreeReturn          "free_return";
    CallEntry           "call_entry";
    CallOutEntry        "call_out_entry";
    CallReturn          "call_return";
    VmmCreateEntry      "vmm_create_entry";
    VmmReleaseEntry     "vmm_release_entry";
    VmmReleaseReturn    "vmm_release_return";
    VmmMapEntry         "vmm_map_entry";
    VmmMapReturn        "vmm_map_return";
    VmmUnmapEntry       "vmm_unmap_entry";
    VmmUnmapReturn      "vmm_unmap_return";
}

impl Program {
    /// The index of this program's run guard in the guard map.
    pub const fn guard(self) -> u32 {
        self as u32
    }
}

const _: () = assert!(
    Program::ALL.len() <= GUARDED_PROGRAMS as usize,
    "more guarded programs than guard map entries: raise GUARDED_PROGRAMS"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_are_distinct_and_within_the_map() {
        for (i, p) in Program::ALL.iter().enumerate() {
            assert_eq!(p.guard() as usize, i, "{}", p.name());
            assert!(p.guard() < GUARDED_PROGRAMS);
        }
    }
}
