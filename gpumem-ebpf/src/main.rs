//! gpumem's eBPF programs, layered bottom-up (each layer uses only those
//! below it):
//!
//! - `maps`: every map;
//! - `base`: atomics, records to the agent, drop counters, the attach
//!   cookie, the tail call that keeps each program on its task's stack;
//! - `device`: the device of a thread's current context;
//! - `account`: what processes, cgroups and limits hold, and calls in
//!   flight;
//! - `limits`: the limit decision, made here and nowhere else; `deny`: the
//!   action that makes a call fail;
//! - `families`: the programs, one module per CUDA API family; one entry
//!   and one return program serve every driver symbol with the same
//!   argument shape (the API id and memory kind come in the attach cookie).
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![feature(asm_experimental_arch)]
#![allow(internal_features)]

mod account;
mod base;
mod deny;
mod device;
mod families;
mod limits;
mod maps;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path; this is never called.
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
