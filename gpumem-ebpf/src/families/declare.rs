//! Limits a process declares in its environment (`gpumem_common::declare`),
//! read by the kernel itself at exec, before the new image runs a single
//! instruction: so a process whose first CUDA call is an allocation is
//! already bound by its declaration, whatever the agent is doing, or
//! whether one runs at all.
//!
//! At `sched_process_exec` the new image's stack holds argc, argv[],
//! NULL, envp[], NULL (fs/binfmt_elf.c's `create_elf_tables`), and its
//! user registers (`bpf_task_pt_regs`) point there: no kernel structure's
//! layout is read. Each environment string's first eight bytes are read;
//! those that begin as a declaring variable's name does are read whole
//! and parsed one byte per `bpf_loop` iteration (the parsers keep their
//! state in `DECLARE_SCRATCH`), so the verifier walks each callback once,
//! not once per byte. What is in force goes into `DECLARED` for the
//! process, and the agent gets a `declared` record either way.
use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_probe_read_kernel,
        bpf_probe_read_user,
        generated::{bpf_loop, bpf_probe_read_user_str, bpf_task_pt_regs},
    },
    programs::RawTracePointContext,
    EbpfContext,
};
use gpumem_common::{
    declare::{
        chars::bounded,
        declaration::Defaults,
        names::{DEVICES, PREFIXES},
        read, CAP,
    },
    event_type, id,
};

use crate::{
    base::records::{emit_from, Subject},
    base::task::Task,
    deny::can_deny,
    maps::{DeclareScratch, DECLARED, DECLARE_SCRATCH, ENV_CONFIG, LIMITS_IN_FORCE, MAX_MATCHES},
};

/// Environment strings looked at, at most (a longer environment's rest
/// is not read: the `declared` record says so).
const MAX_ENV: u32 = 8192;

/// `struct pt_regs`'s `sp` on x86-64 (its layout is the kernel's ABI).
const PT_REGS_SP: usize = 152;

#[inline(always)]
fn scratch() -> Option<&'static mut DeclareScratch> {
    // SAFETY: this CPU's entry; the programs using it do not run at once on
    // one CPU (the fork program has its own field).
    DECLARE_SCRATCH.get_ptr_mut(0).map(|s| unsafe { &mut *s })
}

/// At exec, in the exec'ing task with its new image in place: forgets
/// what the old image declared and reads what the new one does.
#[inline(always)]
pub fn at_exec(tgid: u32) {
    let Some(cfg) = ENV_CONFIG.get(0).copied() else { return };
    let declared_before = LIMITS_IN_FORCE.get(1).copied().unwrap_or(0) != 0;
    let Some(sp) = first_stack_pointer() else { return };
    if declared_before {
        // SAFETY: checked map value pointer.
        if DECLARED.get_ptr(tgid).is_some_and(|d| unsafe { (*d).exec_sp } == sp) {
            return; // another build's exec program read this exec (a takeover)
        }
        let _ = DECLARED.remove(tgid);
    }
    if cfg.honour == 0 {
        return;
    }
    let Some(s) = scratch() else { return };
    // SAFETY: the stack's first word is argc; envp follows argv's NULL.
    let Ok(argc) = (unsafe { bpf_probe_read_user(sp as *const u64) }) else { return };
    s.envp = sp + 8 * (argc + 2);
    s.matches = 0;
    s.scanned = 0;
    // SAFETY: the callback is a static function, its context none.
    unsafe { bpf_loop(MAX_ENV, scan_one as *mut _, core::ptr::null_mut(), 0) };
    if s.matches == 0 && s.scanned != 0 {
        return;
    }
    // SAFETY: writes zeros over a plain-integer struct in the map.
    unsafe { core::ptr::write_bytes(core::ptr::addr_of_mut!(s.decl), 0, 1) };
    if s.scanned == 0 {
        s.decl.flags |= gpumem_common::declare::declaration::flag::INCOMPLETE;
    }
    let matches = s.matches;
    // SAFETY: as above.
    unsafe { bpf_loop(matches, parse_one as *mut _, core::ptr::null_mut(), 0) };
    if s.decl.found == 0 && s.scanned != 0 {
        return; // names alike, but no variable honoured
    }
    // SAFETY: as above.
    unsafe { bpf_loop(DEVICES as u32, finish_device as *mut _, core::ptr::null_mut(), 0) };
    s.decl.finish_rest(&defaults(&cfg));
    if s.decl.in_force() {
        s.kept.fill(&s.decl, sp);
        // By reference: by value it would be copied onto the 512-byte stack.
        #[allow(clippy::needless_borrows_for_generic_args)]
        let inserted = DECLARED.insert(tgid, &s.kept, 0);
        if inserted.is_ok() {
            let _ = LIMITS_IN_FORCE.set(1, 1, 0);
        }
    }
    // SAFETY: plain helper call.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let who = Subject::of(Task::current(), cgroup_id);
    emit_from(event_type::DECLARED, id::NONE, who, core::ptr::addr_of!(s.decl));
}

#[inline(always)]
fn defaults(cfg: &gpumem_common::declare::declaration::EnvConfig) -> Defaults {
    cfg.defaults(can_deny())
}

/// The new image's first user stack pointer (argc's address).
#[inline(always)]
fn first_stack_pointer() -> Option<u64> {
    // SAFETY: plain helper calls on the current task; the result is the
    // task's user registers, read through the helper.
    unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const u8;
        bpf_probe_read_kernel(regs.add(PT_REGS_SP) as *const u64).ok()
    }
}

/// `bpf_loop` callback: environment string `i`. Stops at envp's NULL.
unsafe extern "C" fn scan_one(i: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let Some(s) = scratch() else { return 1 };
    // SAFETY: user memory of the current task, read through the helper.
    let Ok(p) = (unsafe { bpf_probe_read_user((s.envp + 8 * i) as *const u64) }) else { return 1 };
    if p == 0 {
        s.scanned = 1;
        return 1;
    }
    // SAFETY: as above (a string of fewer than 8 bytes reads into the next).
    let Ok(head) = (unsafe { bpf_probe_read_user(p as *const u64) }) else { return 0 };
    if PREFIXES.contains(&head) && (s.matches as usize) < MAX_MATCHES {
        s.ptrs[bounded(s.matches as usize, MAX_MATCHES)] = p;
        s.matches += 1;
    }
    0
}

/// `bpf_loop` callback: reads matched string `k` and what it declares.
unsafe extern "C" fn parse_one(k: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let (Some(s), Some(cfg)) = (scratch(), ENV_CONFIG.get(0)) else { return 1 };
    let p = s.ptrs[bounded(k as usize, MAX_MATCHES)];
    // SAFETY: as above; the helper stops at CAP bytes with a NUL.
    let n = unsafe { bpf_probe_read_user_str(s.buf.as_mut_ptr().cast(), CAP as u32, p as *const _) };
    if n <= 0 {
        return 0;
    }
    let len = bounded(n as usize - 1, CAP);
    let d = defaults(cfg);
    let Some(var) = read::identify(&s.buf, len, cfg.honour, &mut s.decl, &d) else { return 0 };
    // SAFETY: writes zeros over the plain-integer parsers in the map.
    unsafe { core::ptr::write_bytes(core::ptr::addr_of_mut!(s.reader), 0, 1) };
    s.reader.start(var, len as u32);
    // SAFETY: as in `at_exec`.
    unsafe { bpf_loop(len as u32 - var.value_start, feed_one as *mut _, core::ptr::null_mut(), 0) };
    s.reader.finish(&mut s.decl, &d);
    0
}

/// `bpf_loop` callback: device `i`'s limit, from every variable read.
unsafe extern "C" fn finish_device(i: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let (Some(s), Some(cfg)) = (scratch(), ENV_CONFIG.get(0)) else { return 1 };
    s.decl.finish_device(i as usize, &defaults(cfg));
    0
}

/// `bpf_loop` callback: byte `i` of the value being read.
unsafe extern "C" fn feed_one(i: u64, _ctx: *mut core::ffi::c_void) -> i64 {
    let Some(s) = scratch() else { return 1 };
    let c = s.buf[bounded(s.reader.start as usize + i as usize, CAP)];
    s.reader.feed(i as u32, c, &mut s.decl);
    0
}

/// At fork, in the parent: the child's tgid where the child is a new
/// process (not a thread), read at the offset the agent found in the
/// kernel's BTF (`EnvConfig::tgid_offset`); None without one.
#[inline(always)]
pub fn forked_process(ctx: &RawTracePointContext) -> Option<u32> {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    let offset = ENV_CONFIG.get(0).map(|c| c.tgid_offset).filter(|&o| o != 0)?;
    let args = ctx.as_ptr() as *const u64;
    // SAFETY: args[1] of sched_process_fork is the child task; its tgid
    // read through the helper.
    let child: u32 = unsafe {
        let task = *args.add(1) as *const u8;
        bpf_probe_read_kernel(task.add(offset as usize) as *const i32).ok()? as u32
    };
    (child != parent && child != 0).then_some(child)
}

/// At fork, in the parent: a child process `child` starts with the
/// parent's environment, so with its declared limits, counting nothing
/// yet. (Without the tgid's offset, forks are not followed.)
#[inline(always)]
pub fn at_fork(child: u32) {
    if LIMITS_IN_FORCE.get(1).copied().unwrap_or(0) == 0 {
        return;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(from) = DECLARED.get_ptr(parent) else {
        // A process gone without its exit's run (7.x) may have left an
        // entry under this pid: the child declared nothing.
        let _ = DECLARED.remove(child);
        return;
    };
    let Some(s) = scratch() else { return };
    // SAFETY: checked map value pointer, copied whole.
    unsafe { core::ptr::copy_nonoverlapping(from, core::ptr::addr_of_mut!(s.forked), 1) };
    s.forked.zero_counts();
    // By reference: as in `at_exec`.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = DECLARED.insert(child, &s.forked, 0);
}

/// At exit: the process's declared limits go with it.
#[inline(always)]
pub fn forget(tgid: u32) {
    if LIMITS_IN_FORCE.get(1).copied().unwrap_or(0) != 0 {
        let _ = DECLARED.remove(tgid);
    }
}
