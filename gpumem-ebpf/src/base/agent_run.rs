//! Programs the agent runs itself (BPF_PROG_TEST_RUN) and never attaches,
//! whose result it reads. aya's `#[raw_tracepoint]` makes a program return
//! 0 whatever its function returns, so these are declared here instead: a
//! raw tracepoint program (the section aya loads them from) returning its
//! function's result.
macro_rules! agent_run {
    ($(#[$doc:meta])* $name:ident => $run:path) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "raw_tp/sched_process_exit")]
        pub fn $name(ctx: *mut core::ffi::c_void) -> u32 {
            $run(aya_ebpf::programs::RawTracePointContext::new(ctx)) as u32
        }
    };
}
pub(crate) use agent_run;
