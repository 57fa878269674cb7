//! Checks on the built eBPF object that the compiler could silently break:
//! every uprobe program takes its run guard (gpumem-ebpf's exclusive.rs)
//! before it writes anything to its stack, and a run that finds the guard
//! taken leaves without writing to the stack at all. On kernels that give
//! a program a private per-CPU stack, a second run of the same program on
//! the same CPU would otherwise overwrite the first one's spilled values
//! (seen on 7.2 as an oops in `alloc_return`).
//!
//! The check walks each program's instructions from its entry along every
//! branch: before the guard's exchange no store may target r10 (the frame
//! pointer); after it, a path that reaches `exit` with no further helper
//! call is a skipped run and may not have stored to the stack either; a
//! path that reaches a further call is the program's body, where the walk
//! stops (and which must have passed the exchange).
use std::collections::HashSet;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_JMP: u8 = 0x05;
const CLASS_JMP32: u8 = 0x06;
const MODE_MEM: u8 = 0x60;
const MODE_ATOMIC: u8 = 0xc0;
const ATOMIC_XCHG: i32 = 0xe1;
const OP_JA: u8 = 0x00;
const OP_CALL: u8 = 0x80;
const OP_EXIT: u8 = 0x90;
const LD_IMM64: u8 = 0x18;
const FRAME_POINTER: u8 = 10;

#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    dst: u8,
    off: i16,
    imm: i32,
}

fn decode(bytes: &[u8]) -> Vec<Insn> {
    bytes
        .chunks_exact(8)
        .map(|c| Insn {
            code: c[0],
            dst: c[1] & 0x0f,
            off: i16::from_le_bytes([c[2], c[3]]),
            imm: i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

/// Where one program's walk went wrong, or how many guards it passed.
fn check(insns: &[Insn]) -> Result<bool, String> {
    // (pc, guard exchanged, stack written since)
    let mut todo = vec![(0usize, false, false)];
    let mut seen = HashSet::new();
    let mut guarded = false;
    let mut calls_before_guard = 0;
    while let Some(state @ (pc, xchg, stored)) = todo.pop() {
        if !seen.insert(state) {
            continue;
        }
        let Some(i) = insns.get(pc) else { return Err(format!("walked off the end at {pc}")) };
        let class = i.code & 0x07;
        let mode = i.code & 0xe0;
        let next = pc + if i.code == LD_IMM64 { 2 } else { 1 };
        let jump = |off: i64| (pc as i64 + 1 + off) as usize;
        match class {
            CLASS_ST | CLASS_STX if mode == MODE_MEM && i.dst == FRAME_POINTER => {
                if !xchg {
                    return Err(format!("stack store at {pc}, before the guard is taken"));
                }
                todo.push((next, xchg, true));
            }
            CLASS_STX if mode == MODE_ATOMIC && i.imm == ATOMIC_XCHG && !xchg => {
                todo.push((next, true, stored));
            }
            CLASS_JMP | CLASS_JMP32 => match i.code & 0xf0 {
                OP_EXIT => {
                    if stored {
                        return Err(format!("a run that skipped wrote to its stack (exit at {pc})"));
                    }
                }
                OP_CALL if !xchg => {
                    // The guard's own map lookup; any other call comes
                    // after the exchange.
                    calls_before_guard += 1;
                    if calls_before_guard > 1 {
                        return Err(format!("a helper call at {pc} before the guard is taken"));
                    }
                    todo.push((next, xchg, stored));
                }
                OP_CALL => guarded = true, // the body: stop here
                OP_JA if class == CLASS_JMP => todo.push((jump(i64::from(i.off)), xchg, stored)),
                OP_JA => todo.push((jump(i64::from(i.imm)), xchg, stored)),
                _ => {
                    todo.push((next, xchg, stored));
                    todo.push((jump(i64::from(i.off)), xchg, stored));
                }
            },
            _ => todo.push((next, xchg, stored)),
        }
    }
    Ok(guarded)
}

#[test]
fn every_uprobe_program_takes_its_guard_before_writing_to_its_stack() {
    if super::OBJECT.is_empty() {
        println!("SKIPPED: this agent was built without its eBPF object (see build.rs)");
        return;
    }
    // Both objects: the plain one, and the one with `--bpf-log`'s logging.
    for object in [super::OBJECT, super::OBJECT_LOG] {
        check_object(object);
    }
}

fn check_object(object: &[u8]) {
    let file = object::File::parse(object).expect("the eBPF object is an ELF file");
    let guarded_programs: HashSet<&str> =
        gpumem_common::program::Program::ALL.iter().map(|p| p.name()).collect();
    let mut checked = HashSet::new();
    for sym in file.symbols().filter(|s| s.kind() == SymbolKind::Text) {
        let Ok(name) = sym.name() else { continue };
        if !guarded_programs.contains(name) {
            continue;
        }
        let section = file.section_by_index(sym.section_index().expect("a program is in a section")).unwrap();
        let data = section.data().unwrap();
        let start = sym.address() as usize;
        let code = &data[start..start + sym.size() as usize];
        match check(&decode(code)) {
            Ok(true) => {}
            Ok(false) => panic!("{name}: no path reaches the program's body through the guard"),
            Err(e) => panic!("{name}: {e}"),
        }
        checked.insert(name);
    }
    let missing: Vec<_> = guarded_programs.difference(&checked).collect();
    assert!(missing.is_empty(), "programs not found in the object: {missing:?}");
}

#[test]
fn the_walk_finds_a_stack_store_before_the_guard() {
    let st = |dst, off, imm| Insn { code: CLASS_ST | MODE_MEM | 0x18, dst, off, imm };
    let call = Insn { code: CLASS_JMP | OP_CALL, dst: 0, off: 0, imm: 1 };
    let xchg = Insn { code: CLASS_STX | MODE_ATOMIC | 0x18, dst: 0, off: 0, imm: ATOMIC_XCHG };
    let exit = Insn { code: CLASS_JMP | OP_EXIT, dst: 0, off: 0, imm: 0 };
    let skip_if = |off| Insn { code: CLASS_JMP | 0x50, dst: 1, off, imm: 0 }; // if r1 != 0 goto
                                                                              // Guard, then a body that spills and calls: fine.
    let good = [call, xchg, skip_if(3), st(FRAME_POINTER, -8, 0), call, exit, exit];
    assert_eq!(check(&good), Ok(true));
    // A key written to the stack before the guard's lookup.
    let early = [st(FRAME_POINTER, -8, 0), call, xchg, skip_if(1), call, exit];
    assert!(check(&early).unwrap_err().contains("before the guard"));
    // The skip path spills before leaving.
    let skip_spills = [call, xchg, skip_if(1), call, st(FRAME_POINTER, -8, 0), exit];
    assert!(check(&skip_spills).unwrap_err().contains("skipped"));
    // A store through another register is not the stack's.
    let map_store = [call, xchg, skip_if(2), call, exit, st(0, 8, 1), exit];
    assert_eq!(check(&map_store), Ok(true));
}
