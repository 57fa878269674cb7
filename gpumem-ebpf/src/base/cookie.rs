//! The running probe's attach cookie (see `gpumem_common::cookie`): which
//! API the program runs for, its memory kind, and where `deny` returns.
use aya_ebpf::EbpfContext;

/// The attach cookie of the running probe.
#[inline(always)]
pub fn cookie<C: EbpfContext>(ctx: &C) -> u64 {
    // SAFETY: the context pointer is the one the kernel passed in.
    unsafe { aya_ebpf::helpers::generated::bpf_get_attach_cookie(ctx.as_ptr()) }
}

/// The API id of the running probe.
#[inline(always)]
pub fn api<C: EbpfContext>(ctx: &C) -> u32 {
    gpumem_common::cookie::api(cookie(ctx))
}
