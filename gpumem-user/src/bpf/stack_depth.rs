//! A check on the built eBPF objects: each program's stack, with the
//! deepest chain of bpf-to-bpf calls it makes (`--bpf-log`'s global
//! functions, `memcpy`), fits the 512 bytes the kernel allows. The
//! verifier rounds each frame up to 32 bytes and refuses a chain over 512
//! ("combined stack size of N calls is M. Too large", `check_max_stack_depth`
//! in kernel/bpf/verifier.c); on 6.1 the logging object's `alloc_entry`
//! once did, which only the kernel matrix's takeover suites showed. A
//! frame is what the verifier counts: the deepest stack offset the code
//! reaches, through r10 or a pointer made from it in one step (`rX = r10;
//! rX += -n`, as LLVM makes them; an access through a pointer moved again
//! is not followed). A chain follows calls and `bpf_loop` callbacks.
use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionKind};

use super::stack_check::{functions, instructions, CALL, LD_IMM64};

/// `BPF_ALU64 | BPF_MOV | BPF_X` and `BPF_ALU64 | BPF_ADD | BPF_K`.
const MOV64_REG: u8 = 0xbf;
const ADD64_IMM: u8 = 0x07;
/// The kernel's limit (`MAX_BPF_STACK`) and each frame's rounding.
const MAX_STACK: u32 = 512;
const FRAME_ROUND: u32 = 32;

/// The deepest stack offset `code` reaches (bytes below r10): loads and
/// stores at r10 + off, and `rX = r10; rX += -n` (a buffer handed to a
/// helper).
fn frame(code: &[u8]) -> u32 {
    let mut deepest = 0u32;
    let mut from_fp = [false; 11];
    for c in instructions(code) {
        let (dst, src) = (usize::from(c[1] & 0x0f).min(10), usize::from(c[1] >> 4));
        let off = i16::from_le_bytes([c[2], c[3]]);
        let imm = i32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        let class = c[0] & 0x07;
        // LDX (1), ST (2), STX (3): memory at dst + off (stores) or src + off (loads).
        let base = match class {
            1 => Some(src),
            2 | 3 => Some(dst),
            _ => None,
        };
        if base == Some(10) && off < 0 {
            deepest = deepest.max(u32::from(off.unsigned_abs()));
        }
        match (c[0], class) {
            (MOV64_REG, _) => from_fp[dst] = src == 10,
            (ADD64_IMM, _) if from_fp[dst] && imm < 0 => deepest = deepest.max(imm.unsigned_abs()),
            (ADD64_IMM, _) => {}
            (CALL, _) => from_fp[..6].fill(false),
            // LD, LDX, ALU, ALU64: dst written.
            (_, 0 | 1 | 4 | 7) => from_fp[dst] = false,
            _ => {}
        }
    }
    deepest
}

/// A frame as the verifier adds it up.
fn rounded(bytes: u32) -> u32 {
    bytes.max(1).div_ceil(FRAME_ROUND) * FRAME_ROUND
}

/// The functions of an object: name, frame, and the functions it calls.
#[derive(Debug, Default)]
struct Functions {
    frames: HashMap<String, u32>,
    calls: HashMap<String, Vec<String>>,
    /// The programs: functions outside `.text` (each in its own section).
    programs: Vec<String>,
}

impl Functions {
    fn of(object: &[u8]) -> Self {
        let file = object::File::parse(object).expect("the eBPF object is an ELF file");
        let mut f = Functions::default();
        // Each function's section, start and end; calls resolved to them.
        let mut spans: Vec<(object::SectionIndex, u64, u64, String)> = Vec::new();
        for func in functions(&file) {
            let name = func.name.to_string();
            f.frames.insert(name.clone(), frame(func.code));
            if file.section_by_index(func.section).is_ok_and(|s| s.name() != Ok(".text")) {
                f.programs.push(name.clone());
            }
            spans.push((func.section, func.address, func.address + func.code.len() as u64, name));
        }
        let at = |section: object::SectionIndex, addr: u64| {
            spans
                .iter()
                .find(|(s, lo, hi, _)| *s == section && (*lo..*hi).contains(&addr))
                .map(|x| x.3.clone())
        };
        for section in file.sections() {
            let Ok(data) = section.data() else { continue };
            for (offset, reloc) in section.relocations() {
                let Some(c) = data.get(offset as usize..offset as usize + 8) else { continue };
                let RelocationTarget::Symbol(target) = reloc.target() else { continue };
                let Ok(target) = file.symbol_by_index(target) else { continue };
                let Some(target_section) = target.section_index() else { continue };
                let imm = i64::from(i32::from_le_bytes([c[4], c[5], c[6], c[7]]));
                // libbpf's rules: a bpf-to-bpf call's callee starts (imm + 1)
                // instructions after the symbol; a function's address loaded
                // (a `bpf_loop` callback, a frame of its caller's chain to the
                // verifier) is imm bytes after it.
                let callee_addr = if c[0] == CALL && c[1] >> 4 == 1 {
                    target.address() as i64 + (imm + 1) * 8
                } else if c[0] == LD_IMM64
                    && file.section_by_index(target_section).is_ok_and(|s| s.kind() == SectionKind::Text)
                {
                    target.address() as i64 + imm
                } else {
                    continue; // a map, a global: no frame
                } as u64;
                let (Some(caller), Some(callee)) =
                    (at(section.index(), offset), at(target_section, callee_addr))
                else {
                    continue;
                };
                f.calls.entry(caller).or_default().push(callee);
            }
        }
        f
    }

    /// The deepest chain from `name` (its own frame included), rounded as
    /// the verifier rounds, and the chain.
    fn deepest(&self, name: &str, depth: usize) -> (u32, Vec<String>) {
        let own = rounded(self.frames.get(name).copied().unwrap_or(0));
        let below = self
            .calls
            .get(name)
            .filter(|_| depth < 8)
            .into_iter()
            .flatten()
            .map(|c| self.deepest(c, depth + 1))
            .max_by_key(|(d, _)| *d)
            .unwrap_or_default();
        (
            own + below.0,
            [vec![format!("{name} ({})", self.frames.get(name).copied().unwrap_or(0))], below.1].concat(),
        )
    }
}

#[test]
fn every_program_with_its_deepest_chain_of_calls_fits_the_kernels_stack() {
    let uprobes: Vec<&str> = gpumem_common::program::Program::ALL.iter().map(|p| p.name()).collect();
    super::stack_check::each_object(|which, object| {
        let f = Functions::of(object);
        for p in &uprobes {
            assert!(f.programs.iter().any(|q| q == p), "{which} object: program {p} not found");
        }
        for p in &f.programs {
            let (depth, chain) = f.deepest(p, 0);
            assert!(
                depth <= MAX_STACK,
                "{which} object: {p} needs {depth} bytes of stack with its calls ({}), over the kernel's {MAX_STACK}",
                chain.join(" -> ")
            );
        }
    });
}

#[test]
fn frames_and_chains_are_counted_as_the_verifier_counts_them() {
    let insn = |code: u8, regs: u8, off: i16, imm: i32| {
        let mut b = vec![code, regs];
        b.extend(off.to_le_bytes());
        b.extend(imm.to_le_bytes());
        b
    };
    // *(u64 *)(r10 - 24) = r1; r1 = *(u64 *)(r10 - 8); exit
    let stores = [insn(0x7b, 0x1a, -24, 0), insn(0x79, 0xa1, -8, 0), insn(0x95, 0, 0, 0)].concat();
    assert_eq!(frame(&stores), 24);
    // r2 = r10; r2 += -40 (a buffer for a helper)
    let buffer = [insn(MOV64_REG, 0xa2, 0, 0), insn(ADD64_IMM, 0x02, 0, -40), insn(0x95, 0, 0, 0)].concat();
    assert_eq!(frame(&buffer), 40);
    // r2 = r3; r2 += -40 is not the stack
    let other = [insn(MOV64_REG, 0x32, 0, 0), insn(ADD64_IMM, 0x02, 0, -40)].concat();
    assert_eq!(frame(&other), 0);
    // The second slot of a 64-bit load is not an instruction.
    let hidden = [insn(LD_IMM64, 0x01, 0, 0), insn(0x7b, 0x1a, -64, 0)].concat();
    assert_eq!(frame(&hidden), 0);

    assert_eq!((rounded(0), rounded(18), rounded(32), rounded(424)), (32, 32, 32, 448));
    let mut f = Functions::default();
    f.frames.extend([("main".into(), 424), ("log".into(), 48), ("memcpy".into(), 0), ("small".into(), 8)]);
    f.calls.insert("main".into(), vec!["small".into(), "log".into()]);
    f.calls.insert("log".into(), vec!["memcpy".into()]);
    // 6.1's message for this chain: "combined stack size of 3 calls is 544".
    let (depth, chain) = f.deepest("main", 0);
    assert_eq!(depth, 544);
    assert_eq!(chain, ["main (424)", "log (48)", "memcpy (0)"]);
}
