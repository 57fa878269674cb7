//! Whether this build's programs run now: the gate every attached program
//! passes first (`gpumem_common::handover` has the protocol and why it
//! loses no hit while one build takes over from another).
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, programs::RawTracePointContext, EbpfContext};
use gpumem_common::handover::{self, Uprobe};

use crate::maps::{HANDOVER, HANDOVER_MARKS};

/// This build's tag (`gpumem_common::handover::tag`), set by the agent at
/// load.
#[no_mangle]
static BUILD: u32 = 0;

/// The handover word, read once (one 8-byte load).
#[inline(always)]
fn word() -> Option<u64> {
    let h = HANDOVER.get_ptr(0)?;
    // SAFETY: a checked map value pointer; the word is 8-byte aligned and
    // stored whole (see `handover_set`).
    Some(unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*h).word)) })
}

#[inline(always)]
fn me() -> u32 {
    // SAFETY: a read of read-only data the loader set.
    unsafe { core::ptr::read_volatile(&BUILD) }
}

/// Whether a uprobe program (its return if `is_return`) runs this hit;
/// its site is the attach cookie of `ctx`, read only while a takeover is
/// under way.
#[inline(always)]
pub fn uprobe_runs<C: EbpfContext>(ctx: &C, is_return: bool) -> bool {
    let Some(word) = word() else { return false };
    let me = me();
    if word == handover::steady(me) {
        return true; // no takeover under way: the common case
    }
    let cookie = crate::base::cookie::cookie(ctx);
    let thread = bpf_get_current_pid_tgid();
    match handover::uprobe(word, me) {
        Uprobe::Run => true,
        Uprobe::RunClearing => {
            let _ = HANDOVER_MARKS.remove(thread);
            true
        }
        Uprobe::StandByMarking => {
            mark(thread, handover::mark(cookie, is_return, false));
            false
        }
        Uprobe::RunMarking => {
            mark(thread, handover::mark(cookie, is_return, true));
            true
        }
        Uprobe::RunUnlessRan => {
            let Some(m) = HANDOVER_MARKS.get_ptr(thread) else { return true };
            // SAFETY: a checked map value pointer, read once.
            let ran = unsafe { *m } == handover::mark(cookie, is_return, true);
            let _ = HANDOVER_MARKS.remove(thread);
            !ran
        }
        Uprobe::StandBy => false,
    }
}

/// Leaves `thread`'s mark; a full map is counted (`stat::MAP_FULL`): the
/// old build's program then runs whatever the new one did.
#[inline(always)]
fn mark(thread: u64, value: u64) {
    if HANDOVER_MARKS.insert(thread, value, 0).is_err() {
        crate::base::counters::count(gpumem_common::stat::MAP_FULL);
    }
}

/// Forgets the mark of exiting `thread` while a takeover is under way:
/// a later thread given its id must not find it (and the marks map does
/// not fill with the dead while a takeover stays interrupted).
#[inline(always)]
pub fn forget_mark(thread: u64) {
    if word().is_some_and(|w| w != handover::steady(me())) {
        let _ = HANDOVER_MARKS.remove(thread);
    }
}

/// Whether a raw tracepoint program runs this hit.
#[inline(always)]
pub fn tracepoint_runs() -> bool {
    word().is_some_and(|w| handover::tracepoint(w, me()))
}

crate::base::agent_run::agent_run!(
    /// Never attached: the agent runs it (BPF_PROG_TEST_RUN) to store
    /// args[0] as the handover word in one atomic step, which a map update
    /// from user space (a copy of the value) is not. Returns 0, or 1 if the
    /// map has no entry.
    handover_set => set
);

#[inline(always)]
fn set(ctx: RawTracePointContext) -> i32 {
    let args = aya_ebpf::EbpfContext::as_ptr(&ctx) as *const u64;
    // SAFETY: args[0] of the context the agent passed in.
    let word = unsafe { *args };
    let Some(h) = HANDOVER.get_ptr_mut(0) else { return 1 };
    // SAFETY: a checked map value pointer, 8-byte aligned.
    unsafe { crate::base::atomic::exchange(core::ptr::addr_of_mut!((*h).word), word) };
    0
}
