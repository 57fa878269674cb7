//! Whether this kernel lets uprobe programs write registers (what `deny`
//! needs), asked before the object is opened: a four-instruction program
//! storing into `pt_regs`, loaded on its own as aya loads a uprobe program
//! (no expected attach type). Kernels that do not let it refuse it with
//! `invalid bpf_context access`. Asked this way, the object is opened
//! once, with its deny path live or removed, where an object opened only
//! to load a probe program of its own cost a second read of the kernel's
//! BTF and a second set of maps (the ring buffer among them).
use std::sync::OnceLock;

use super::sys::{self, insn};

/// Where `ax` is in x86-64's `struct pt_regs` (r15, r14, r13, r12, bp, bx,
/// r11, r10, r9, r8, ax, ...): what `deny` writes.
const PT_REGS_AX: i16 = 10 * 8;

/// None if uprobe programs may write registers here, else the kernel's
/// reason (asked once per process).
pub fn refusal() -> Option<String> {
    static ANSWER: OnceLock<Option<String>> = OnceLock::new();
    ANSWER.get_or_init(ask).clone()
}

fn ask() -> Option<String> {
    let insns = [
        insn(0xb7, 2, 0, 0),          // r2 = 0
        insn(0x7b, 1, 2, PT_REGS_AX), // *(u64 *)(r1 + ax) = r2
        insn(0xb7, 0, 0, 0),          // r0 = 0
        insn(0x95, 0, 0, 0),          // exit
    ];
    match sys::load_as("gpumem_regwrite", &insns, None) {
        Ok(_) => None,
        Err(e) if e.log.contains("invalid bpf_context access") => {
            Some("the verifier rejects stores into pt_regs: invalid bpf_context access".into())
        }
        Err(e) => {
            let last = e.log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            Some(format!("a uprobe program storing into pt_regs was refused ({}): {last}", e.error))
        }
    }
}
