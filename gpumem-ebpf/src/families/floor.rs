//! Empty programs for `cargo xtask bench`: attached by `gpumem floor` at
//! the same probe sites as the real ones, they measure what the kernel's
//! uprobe trap costs on its own, the floor gpumem's overhead is compared to.
use aya_ebpf::{
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};

#[uprobe]
pub fn floor_entry(_ctx: ProbeContext) -> u32 {
    0
}

#[uretprobe]
pub fn floor_return(_ctx: RetProbeContext) -> u32 {
    0
}
