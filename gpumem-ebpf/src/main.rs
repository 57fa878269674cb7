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

/// A note that makes this object another build without changing what it
/// does: empty, or the text (at most 32 bytes) of `GPUMEM_BUILD_NOTE` when
/// it was built. The agent tells builds apart by their objects' bytes, so an
/// agent built with another note takes over the pinned state of this one
/// (`run --persist`) as a newer release would. `cargo xtask image` builds a
/// second image this way for the test of an upgrade between two images.
#[link_section = "gpumem_build"]
#[no_mangle]
static BUILD_NOTE: [u8; 32] = build_note();

const fn build_note() -> [u8; 32] {
    let text = match option_env!("GPUMEM_BUILD_NOTE") {
        Some(t) => t.as_bytes(),
        None => b"",
    };
    let mut note = [0u8; 32];
    let mut i = 0;
    while i < text.len() && i < note.len() {
        note[i] = text[i];
        i += 1;
    }
    note
}
