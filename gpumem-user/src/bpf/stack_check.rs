//! A check on the built eBPF objects that the compiler could silently
//! break: every uprobe program holds a tail call (gpumem-ebpf's
//! `base/task_stack.rs`), which keeps the kernel from giving it a private
//! per-CPU stack that a second run of it on the same CPU would share. The
//! verifier decides by scanning the instructions, so this does too: a
//! `call` of helper 12 (`bpf_tail_call`), before any other helper call.
use std::collections::HashSet;

use object::{Object, ObjectSection, ObjectSymbol, SectionIndex, SymbolKind};

/// `BPF_JMP | BPF_CALL`.
pub(super) const CALL: u8 = 0x85;
/// `BPF_LD | BPF_IMM | BPF_DW`: two instruction slots.
pub(super) const LD_IMM64: u8 = 0x18;
/// The helper's id (`BPF_FUNC_tail_call`).
const TAIL_CALL: i32 = 12;

/// The helpers (by id) the code calls, in order. bpf-to-bpf calls (source
/// register 1) and kfunc calls (2) are left out.
fn helper_calls(code: &[u8]) -> Vec<i32> {
    instructions(code)
        .filter(|c| c[0] == CALL && c[1] >> 4 == 0)
        .map(|c| i32::from_le_bytes([c[4], c[5], c[6], c[7]]))
        .collect()
}

/// The instructions of `code`, 8 bytes each; a 64-bit load's second slot,
/// whatever it holds, is not one.
pub(super) fn instructions(code: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pc = 0;
    std::iter::from_fn(move || {
        let c = code.get(pc * 8..pc * 8 + 8)?;
        pc += if c[0] == LD_IMM64 { 2 } else { 1 };
        Some(c)
    })
}

/// Why one program's code does not run on its task's stack, if it does not.
fn check(code: &[u8]) -> Result<(), String> {
    match helper_calls(code).first() {
        Some(&TAIL_CALL) => Ok(()),
        Some(other) => Err(format!("its first helper call is helper {other}, not the tail call (12)")),
        None => Err("it calls no helper, so it holds no tail call".into()),
    }
}

#[test]
fn every_uprobe_program_begins_with_the_tail_call_that_keeps_it_on_its_tasks_stack() {
    each_object(|_, object| check_object(object));
}

/// Runs `check` on both built objects, the plain one and the one with
/// `--bpf-log`'s logging (named "plain" and "logging"); says SKIPPED where
/// the agent was built without them.
pub(super) fn each_object(check: impl Fn(&str, &[u8])) {
    if super::OBJECT.is_empty() {
        println!("SKIPPED: this agent was built without its eBPF object (see build.rs)");
        return;
    }
    for (which, object) in [("plain", super::OBJECT), ("logging", super::OBJECT_LOG)] {
        check(which, object);
    }
}

fn check_object(object: &[u8]) {
    let file = object::File::parse(object).expect("the eBPF object is an ELF file");
    let programs: HashSet<&str> = gpumem_common::program::Program::ALL.iter().map(|p| p.name()).collect();
    let mut checked = HashSet::new();
    for f in functions(&file).filter(|f| programs.contains(f.name)) {
        if let Err(e) = check(f.code) {
            panic!("{}: {e}", f.name);
        }
        checked.insert(f.name);
    }
    let missing: Vec<_> = programs.difference(&checked).collect();
    assert!(missing.is_empty(), "programs not found in the object: {missing:?}");
}

/// A function of an eBPF object: a program (in a section of its own) or
/// a function programs call (in `.text`).
pub(super) struct Function<'a> {
    pub name: &'a str,
    pub section: SectionIndex,
    /// Where it starts in its section.
    pub address: u64,
    pub code: &'a [u8],
}

/// Every function of `file`, with its code.
pub(super) fn functions<'a>(file: &'a object::File<'a>) -> impl Iterator<Item = Function<'a>> {
    file.symbols().filter(|s| s.kind() == SymbolKind::Text && s.size() > 0).filter_map(|sym| {
        let (name, section) = (sym.name().ok()?, sym.section_index()?);
        let data = file.section_by_index(section).ok()?.data().ok()?;
        let code = data.get(sym.address() as usize..(sym.address() + sym.size()) as usize)?;
        Some(Function { name, section, address: sym.address(), code })
    })
}

#[test]
fn the_scan_finds_the_tail_call_first_or_says_what_came_first() {
    let insn = |code: u8, regs: u8, imm: i32| {
        let mut b = vec![code, regs, 0, 0];
        b.extend(imm.to_le_bytes());
        b
    };
    let ld_map = [insn(LD_IMM64, 0x12, 0), insn(0, 0, 0)].concat(); // r2 = map (two slots)
    let exit = insn(0x95, 0, 0);
    let good = [ld_map.clone(), insn(CALL, 0, TAIL_CALL), insn(CALL, 0, 1), exit.clone()].concat();
    assert_eq!(check(&good), Ok(()));
    // A map lookup before the tail call.
    let late = [insn(CALL, 0, 1), ld_map.clone(), insn(CALL, 0, TAIL_CALL), exit.clone()].concat();
    assert!(check(&late).unwrap_err().contains("helper 1"));
    // A bpf-to-bpf call (source register 1) is not a helper call.
    let sub = [insn(CALL, 0x10, 7), insn(CALL, 0, TAIL_CALL), exit.clone()].concat();
    assert_eq!(check(&sub), Ok(()));
    // The second slot of a 64-bit load is not an instruction, whatever it holds.
    let hidden = [insn(LD_IMM64, 0x12, 0), insn(CALL, 0, 1), insn(CALL, 0, TAIL_CALL), exit.clone()].concat();
    assert_eq!(check(&hidden), Ok(()));
    assert!(check(&exit).unwrap_err().contains("no helper"));
}
