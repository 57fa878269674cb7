//! Which device a thread's allocations go to: the device of its current
//! context. The context family (`families/context.rs`) learns contexts'
//! devices and threads' current contexts; everything that charges reads
//! them here.
use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use gpumem_common::{CtxKey, DEVICE_UNKNOWN};

use crate::maps::{CTX_DEVICE, THREAD_CTX};

/// The device of the calling thread's current context, if known.
#[inline(always)]
pub fn current_device() -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: values are copied out.
    let Some(ctx) = (unsafe { THREAD_CTX.get(pid_tgid) }).copied() else {
        return DEVICE_UNKNOWN;
    };
    let key = CtxKey { tgid: (pid_tgid >> 32) as u32, _pad: 0, ctx };
    // SAFETY: as above.
    unsafe { CTX_DEVICE.get(key) }.copied().unwrap_or(DEVICE_UNKNOWN)
}
