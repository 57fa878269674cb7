//! Which device a thread's allocations go to: the device of its current
//! context. The context family (`families/context.rs`) learns contexts'
//! devices and sets threads' current contexts here; everything that
//! charges reads them here.
//!
//! Where task storage is used (`TASK_CALLS_ON`), a thread's
//! current context lives in its own `TASK_CTX`, with the device found for
//! it: one get per allocation, where two LRU lookups (`THREAD_CTX` by
//! thread, `CTX_DEVICE` by context) took about 70 ns of `alloc_entry`'s
//! 250. The device kept is looked up again once any context's device has
//! been learned since (`CTX_DEVICE_GENERATION`), so it is exactly what
//! the lookups would say. A thread whose context was set before this
//! build ran (a takeover from a build without `TASK_CTX`) or whose storage
//! the kernel could not give is read from `THREAD_CTX`, as before.
use gpumem_common::{CtxKey, ThreadCtx, DEVICE_UNKNOWN};

use crate::{
    base::{self, atomic::add_nofetch, task::Task},
    maps::{CTX_DEVICE, CTX_DEVICE_GENERATION, TASK_CTX, THREAD_CTX},
};

/// The device of the calling thread's (`task`'s) current context, if
/// known.
#[inline(always)]
pub fn current_device(task: Task) -> u32 {
    if let Some(t) = TASK_CTX.existing(task) {
        // SAFETY: checked map value pointer, the current task's own.
        unsafe {
            if (*t).known == 1 {
                let generation = base::generation(&CTX_DEVICE_GENERATION).wrapping_add(1);
                if (*t).generation != generation {
                    (*t).device = device_of(task, (*t).ctx);
                    (*t).generation = generation;
                }
                return (*t).device;
            }
        }
    }
    // SAFETY: values are copied out.
    let Some(ctx) = (unsafe { THREAD_CTX.get(task.pid_tgid()) }).copied() else {
        return DEVICE_UNKNOWN;
    };
    device_of(task, ctx)
}

/// Makes `ctx` the calling thread's (`task`'s) current context (0: none
/// gpumem tracks).
#[inline(always)]
pub fn set_current(task: Task, ctx: u64) {
    if let Some(t) = TASK_CTX.current(task) {
        // SAFETY: checked map value pointer, the current task's own.
        unsafe { *t = ThreadCtx { ctx, generation: 0, device: DEVICE_UNKNOWN, known: 1 } };
        return;
    }
    let pid_tgid = task.pid_tgid();
    if ctx == 0 {
        let _ = THREAD_CTX.remove(pid_tgid);
    } else {
        let _ = THREAD_CTX.insert(pid_tgid, ctx, 0);
    }
}

/// Learns that `ctx` of the calling process (`task`'s) is on `device`.
#[inline(always)]
pub fn learn(task: Task, ctx: u64, device: u32) {
    let key = CtxKey { tgid: task.tgid(), _pad: 0, ctx };
    let _ = CTX_DEVICE.insert(key, device, 0);
    // After the write: a device kept from before the bump is looked up again.
    if let Some(g) = CTX_DEVICE_GENERATION.get_ptr_mut(0) {
        // SAFETY: checked map value pointer, 8-byte aligned.
        unsafe { add_nofetch(g, 1) };
    }
}

/// The device of context `ctx` of the calling process (`task`'s; its pid
/// read here, where it is needed: the kept device, the common case, needs
/// none).
#[inline(always)]
fn device_of(task: Task, ctx: u64) -> u32 {
    if ctx == 0 {
        return DEVICE_UNKNOWN;
    }
    let key = CtxKey { tgid: task.tgid(), _pad: 0, ctx };
    // SAFETY: copied out.
    unsafe { CTX_DEVICE.get(key) }.copied().unwrap_or(DEVICE_UNKNOWN)
}
