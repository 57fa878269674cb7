//! Where each probe goes in its function.
//!
//! A uprobe's int3 replaces the first byte of the instruction at the probe
//! site; when it hits, the kernel either emulates that instruction (a few
//! kinds: relative branches, pushes, some nops) or copies it out of line
//! and single-steps it, a second trap (and on a KVM guest an exit to the
//! hypervisor). NVIDIA's entry points all begin with a RIP-relative
//! `cmpl`, which is single-stepped: 16-20x the cost of the probe's own
//! programs. So the agent decodes each entry point's first instructions
//! and puts the probe (entry, return and the deny rewrite alike) at the
//! first one the running kernel emulates, if every instruction before it
//! falls through and changes nothing the programs read: neither memory,
//! nor the stack pointer, nor an argument register. In NVIDIA's stubs that
//! is the `je` after the `cmpl`. Otherwise the probe stays at offset 0.
//!
//! The rule lives here, one module per architecture (x86-64 now).
mod sites;
mod x86_64;

pub use self::{
    sites::{How, Site, Summary, WINDOW},
    x86_64::{choose, ret_after, Emulation},
};
