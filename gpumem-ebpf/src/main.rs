//! gpumem's eBPF programs.
//!
//! One module per CUDA API family; each holds an entry uprobe and a return
//! uretprobe that serve every driver symbol with the same argument layout
//! (the API id and memory kind come in the attach cookie). `account` holds
//! the in-kernel accounting every family shares; `maps` declares every map.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![feature(asm_experimental_arch)]
#![allow(internal_features)]

mod account;
mod alloc;
mod array;
mod atomic;
mod context;
mod deny;
mod exclusive;
mod exit;
mod floor;
mod free;
mod held;
mod limits;
mod maps;
mod report;
mod vmm;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path; this is never called.
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
