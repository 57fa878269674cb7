//! A check on the built eBPF objects that the compiler could silently
//! break: kernel 6.1's first pass over a program's control flow
//! (`check_cfg`, a depth-first walk) accepts a loop only where the edge
//! back to an instruction still on the walk's path is a jump; one that
//! falls through into it (the loop's last instruction not a jump, or a
//! call) is refused before any verification ("back-edge from insn N to
//! N+1"). Later kernels accept both, and LLVM lays loops out either way
//! (the live table's probe loop, gpumem-ebpf's `account/live.rs`), so
//! this walks each function as 6.1 does: a conditional jump's fall-through
//! first, then its target.
use super::stack_check::{each_object, functions, LD_IMM64};

/// An instruction's edges, each `(target, may close a loop)`; a target
/// past the end is left to the kernel's other checks.
fn edges(code: &[u8], at: usize) -> Vec<(usize, bool)> {
    let c = &code[at * 8..at * 8 + 8];
    let (opcode, offset) = (c[0], i16::from_le_bytes([c[2], c[3]]));
    let class = opcode & 0x07;
    if class != 0x05 && class != 0x06 {
        // Not a jump: one edge, to the next instruction.
        let len = if opcode == LD_IMM64 { 2 } else { 1 };
        return vec![(at + len, false)];
    }
    let target = (at as i64 + 1 + i64::from(offset)) as usize;
    match opcode & 0xf0 {
        0x90 => vec![],                // exit
        0x80 => vec![(at + 1, false)], // call: its return falls through
        0x00 if class == 0x05 => vec![(target, true)],
        _ => vec![(at + 1, true), (target, true)],
    }
}

/// The fall-through edges of `code` (one function) that close a loop,
/// `(from, to)` by instruction index.
fn fall_through_back_edges(code: &[u8]) -> Vec<(usize, usize)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Seen {
        No,
        OnPath,
        Done,
    }
    let count = code.len() / 8;
    let mut seen = vec![Seen::No; count];
    let mut found = Vec::new();
    if count == 0 {
        return found;
    }
    // The path: each instruction with the index of its next edge to take.
    let mut path = vec![(0usize, 0usize)];
    seen[0] = Seen::OnPath;
    while let Some(&mut (at, ref mut next)) = path.last_mut() {
        let out = edges(code, at);
        let Some(&(to, loop_ok)) = out.get(*next) else {
            seen[at] = Seen::Done;
            path.pop();
            continue;
        };
        *next += 1;
        match seen.get(to) {
            Some(Seen::No) => {
                seen[to] = Seen::OnPath;
                path.push((to, 0));
            }
            Some(Seen::OnPath) if !loop_ok => found.push((at, to)),
            _ => {}
        }
    }
    found
}

#[test]
fn no_loop_in_the_objects_closes_by_falling_through() {
    each_object(|which, object| {
        let file = object::File::parse(object).expect("the eBPF object is an ELF file");
        let mut bad = Vec::new();
        for f in functions(&file) {
            for (from, to) in fall_through_back_edges(f.code) {
                bad.push(format!("{}: {from} -> {to}", f.name));
            }
        }
        assert!(
            bad.is_empty(),
            "{which} object: loops kernel 6.1 refuses (\"back-edge from insn\"): {bad:?}; write the loop so that it \
             is tested at its end (`loop {{ ..; i += 1; if i == N {{ break }} }}`)"
        );
    });
}

#[test]
fn the_walk_tells_a_jump_back_from_a_fall_through_back() {
    let insn = |code: u8, off: i16| {
        let mut b = vec![code, 0];
        b.extend(off.to_le_bytes());
        b.extend([0; 4]);
        b
    };
    let (mov, exit, ja, jeq, call) = (0xb7, 0x95, 0x05, 0x15, 0x85);
    // 0: r0 = 0; 1: if r0 == 0 goto 3; 2: goto 0 (a jump back); 3: exit.
    let jump_back = [insn(mov, 0), insn(jeq, 1), insn(ja, -3), insn(exit, 0)].concat();
    assert_eq!(fall_through_back_edges(&jump_back), vec![]);
    // 0: goto 2; 1: r0 = 0 (falls into 2, on the path); 2: if r0 == 0
    // goto 1; 3: exit. The layout of the failure seen on 6.1.
    let falls_back = [insn(ja, 1), insn(mov, 0), insn(jeq, -2), insn(exit, 0)].concat();
    assert_eq!(fall_through_back_edges(&falls_back), vec![(1, 2)]);
    // A call's return falls through too.
    let call_back = [insn(ja, 1), insn(call, 0), insn(jeq, -2), insn(exit, 0)].concat();
    assert_eq!(fall_through_back_edges(&call_back), vec![(1, 2)]);
    // A 64-bit load (1 and 2) falls through from its second slot, which is
    // not walked: 0: goto 3; 1: r1 = map; 3: if r0 == 0 goto 1; 4: exit.
    let load = [insn(ja, 2), insn(LD_IMM64, 0), insn(0, 0), insn(jeq, -3), insn(exit, 0)].concat();
    assert_eq!(fall_through_back_edges(&load), vec![(1, 3)]);
}
