//! The x86-64 rule: which instructions the kernel's uprobes emulate
//! (`arch/x86/kernel/uprobes.c`), and which may be stepped past.
//!
//! Emulated, by kernel version:
//! - relative `jmp`, `call` and conditional jumps, unless they carry a
//!   0x66 prefix (refused) or a segment or lock prefix (the probe cannot
//!   even be installed): since 3.15;
//! - `push reg` of a 64-bit register (`50`-`57`, `41 50`-`41 57`): since
//!   4.15;
//! - the one-byte `nop` (0x90): always; multi-byte nops (`0f 1f /0`) from
//!   6.19 (6.16 to 6.18 emulate only the kernel's own nop patterns, which
//!   this rule does not rely on).
//!
//! Everything else (a RIP-relative `cmpl`, `endbr64`, `sub $n,%rsp`,
//! `mov`) is single-stepped out of line.
use aya::util::KernelVersion;
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind,
    Register,
};

use super::sites::{How, Site, WINDOW};

/// What the running kernel emulates beyond relative branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emulation {
    /// `push reg` (4.15).
    pub push: bool,
    /// Multi-byte nops (6.19).
    pub long_nops: bool,
}

impl Emulation {
    /// Branches only: what every kernel gpumem runs on emulates.
    pub const BRANCHES: Self = Self { push: false, long_nops: false };

    /// What kernel `v` emulates.
    pub fn of(v: KernelVersion) -> Self {
        Self { push: v >= KernelVersion::new(4, 15, 0), long_nops: v >= KernelVersion::new(6, 19, 0) }
    }

    /// The running kernel's; branches only if its version cannot be read.
    pub fn current() -> Self {
        KernelVersion::current().map_or(Self::BRANCHES, Self::of)
    }
}

/// Registers a probe's programs read at the entry (the arguments and the
/// stack pointer, where the return address is and `deny` returns through).
const READ_BY_PROGRAMS: [Register; 7] =
    [Register::RDI, Register::RSI, Register::RDX, Register::RCX, Register::R8, Register::R9, Register::RSP];

/// The probe site in a function whose code starts with `code`.
pub fn choose(code: &[u8], kernel: Emulation) -> Site {
    let window = &code[..code.len().min(WINDOW)];
    let mut decoder = Decoder::with_ip(64, window, 0, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() {
            break;
        }
        let at = insn.ip() as usize;
        let bytes = &window[at..at + insn.len()];
        if emulated(&insn, bytes, kernel) {
            let how = if at == 0 { How::Emulated } else { How::Shifted };
            return Site { offset: at as u32, how };
        }
        if !harmless(&insn, &mut info) {
            break;
        }
    }
    Site::START
}

/// The first `ret` instruction at or after `from` in `code` (decoded in
/// order), what `deny` returns through: its offset in `code`.
pub fn ret_after(code: &[u8], from: usize) -> Option<u32> {
    let mut decoder = Decoder::with_ip(64, code.get(from..)?, from as u64, DecoderOptions::NONE);
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() {
            return None;
        }
        if insn.code() == Code::Retnq {
            return Some(insn.ip() as u32);
        }
    }
    None
}

/// Whether the kernel emulates `insn` (whose bytes are `bytes`).
fn emulated(insn: &Instruction, bytes: &[u8], kernel: Emulation) -> bool {
    let prefixes: Vec<u8> = bytes.iter().copied().take_while(|&b| is_prefix(b)).collect();
    let relative = matches!(insn.op0_kind(), OpKind::NearBranch64)
        && (insn.is_jmp_short_or_near() || insn.is_jcc_short_or_near() || insn.is_call_near());
    if relative {
        // 0x66 is refused; segment and lock prefixes refuse the probe.
        return !prefixes.iter().any(|p| matches!(p, 0x66 | 0x26 | 0x2E | 0x36 | 0x3E | 0xF0));
    }
    let push64 = insn.code() == Code::Push_r64 && insn.len() <= 2 && prefixes.iter().all(|&p| p == 0x41);
    if push64 {
        return kernel.push;
    }
    match insn.code() {
        Code::Nopd | Code::Nopq | Code::Nopw => insn.len() == 1,
        Code::Nop_rm16 | Code::Nop_rm32 | Code::Nop_rm64 => kernel.long_nops,
        _ => false,
    }
}

/// Whether the CPU may run `insn` before the probe without changing what
/// the programs see: it falls through, writes no memory, and writes no
/// register the programs read.
fn harmless(insn: &Instruction, info: &mut InstructionInfoFactory) -> bool {
    if insn.flow_control() != FlowControl::Next {
        return false;
    }
    let writes = |a: OpAccess| {
        matches!(a, OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite)
    };
    let info = info.info(insn);
    let writes_memory = info.used_memory().iter().any(|m| writes(m.access()));
    let writes_read_register = info
        .used_registers()
        .iter()
        .any(|r| writes(r.access()) && READ_BY_PROGRAMS.contains(&r.register().full_register()));
    !writes_memory && !writes_read_register
}

/// An x86 legacy or REX prefix byte.
fn is_prefix(b: u8) -> bool {
    matches!(b, 0x26 | 0x2E | 0x36 | 0x3E | 0x64 | 0x65 | 0x66 | 0x67 | 0xF0 | 0xF2 | 0xF3 | 0x40..=0x4F)
}

#[cfg(test)]
mod tests;
