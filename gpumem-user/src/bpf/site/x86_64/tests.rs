use super::*;

/// NVIDIA's stubs, as their libraries ship them (`cuMemAlloc_v2` and
/// `cuCtxSetCurrent` of Debian's libcuda1 535.261.03 and 550.163.01):
/// `cmpl $0x321cba00, state(%rip); je 1f; jmp *slot(%rip); nopw;
/// 1: mov $4, %eax; ret`.
const NVIDIA: [[u8; 32]; 4] = [
    hex("813d3e35930100ba1c32740cff25c6b88301660f1f440000b804000000c36690"),
    hex("813daee9930100ba1c32740cff25166f8401660f1f440000b804000000c36690"),
    hex("813d26d88d0100ba1c32740cff25465f7e01660f1f440000b804000000c36690"),
    hex("813d06778e0100ba1c32740cff2506007f01660f1f440000b804000000c36690"),
];

const fn hex(s: &str) -> [u8; 32] {
    let b = s.as_bytes();
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = (digit(b[2 * i]) << 4) | digit(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn digit(c: u8) -> u8 {
    if c <= b'9' {
        c - b'0'
    } else {
        c - b'a' + 10
    }
}

const ALL: Emulation = Emulation { push: true, long_nops: true };

#[test]
fn nvidia_stubs_are_probed_at_their_je_and_deny_returns_through_their_ret() {
    for stub in NVIDIA {
        for kernel in [Emulation::BRANCHES, ALL] {
            assert_eq!(choose(&stub, kernel), Site { offset: 10, how: How::Shifted });
        }
        assert_eq!(ret_after(&stub, 10), Some(0x1d), "the `ret` after `mov $4,%eax`");
    }
}

#[test]
fn a_push_at_the_start_is_emulated_where_the_kernel_emulates_pushes() {
    // The simulated driver's release build: `push %rax; ...`.
    let code = [0x50, 0x48, 0x89, 0xf8, 0x58, 0xc3];
    assert_eq!(choose(&code, ALL), Site { offset: 0, how: How::Emulated });
    assert_eq!(choose(&code, Emulation::BRANCHES), Site::START, "a push writes the stack: no further");
    // `push %r12` (41 54) too; `pushw %ax` (66 50) is not a 64-bit push.
    assert_eq!(choose(&[0x41, 0x54, 0xc3], ALL).how, How::Emulated);
    assert_eq!(choose(&[0x66, 0x50, 0xc3], ALL), Site::START);
}

#[test]
fn stack_and_argument_writes_stop_the_search() {
    // The debug build: `sub $0x18,%rsp` moves the stack.
    assert_eq!(choose(&[0x48, 0x83, 0xec, 0x18, 0xeb, 0x00], ALL), Site::START);
    // `mov %rsi,%rdi` changes an argument; `mov %rdi,(%rax)` writes memory.
    assert_eq!(choose(&[0x48, 0x89, 0xf7, 0xeb, 0x00], ALL), Site::START);
    assert_eq!(choose(&[0x48, 0x89, 0x38, 0xeb, 0x00], ALL), Site::START);
    // `mov %rdi,%rax` changes a register no program reads at the entry.
    assert_eq!(choose(&[0x48, 0x89, 0xf8, 0xeb, 0x00], ALL), Site { offset: 3, how: How::Shifted });
}

#[test]
fn endbr64_is_stepped_past_to_the_push_after_it() {
    let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
    assert_eq!(choose(&code, ALL), Site { offset: 4, how: How::Shifted });
    assert_eq!(choose(&code, Emulation::BRANCHES), Site::START);
}

#[test]
fn refused_prefixes_and_far_sites_are_not_chosen() {
    // 0x66-prefixed and segment-prefixed branches are refused by the kernel.
    assert_eq!(choose(&[0x66, 0xeb, 0x00], ALL), Site::START);
    assert_eq!(choose(&[0x3e, 0x74, 0x00], ALL), Site::START);
    // A branch beyond the window is not reached.
    let mut far = vec![0x48, 0x89, 0xf8]; // mov %rdi,%rax
    far.extend(std::iter::repeat_n([0x48, 0x89, 0xf8], 12).flatten());
    far.extend([0x74, 0x00]);
    assert!(far.len() > WINDOW);
    assert_eq!(choose(&far, ALL), Site::START);
}

#[test]
fn nops_by_kernel_version() {
    assert_eq!(choose(&[0x90, 0xc3], Emulation::BRANCHES).how, How::Emulated);
    let nopl = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3];
    assert_eq!(choose(&nopl, ALL).how, How::Emulated);
    assert_eq!(choose(&nopl, Emulation::BRANCHES), Site::START, "nopl is stepped past, then a ret stops");
    assert_eq!(Emulation::of(KernelVersion::new(6, 1, 0)), Emulation { push: true, long_nops: false });
    assert_eq!(Emulation::of(KernelVersion::new(7, 2, 13)), ALL);
}

#[test]
fn ret_is_an_instruction_not_a_byte() {
    // `mov $0xc3, %eax; ret`: the first 0xC3 byte is an immediate.
    let code = [0xb8, 0xc3, 0x00, 0x00, 0x00, 0xc3];
    assert_eq!(ret_after(&code, 0), Some(5));
    assert_eq!(ret_after(&[0x90, 0x90], 0), None);
    assert_eq!(ret_after(&[0xc3], 7), None);
}
