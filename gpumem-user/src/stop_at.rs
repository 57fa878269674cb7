//! A testing aid: with `GPUMEM_STOP_AT=<step>` in its environment the
//! agent stops itself (SIGSTOP) at that step, so that a test can signal or
//! kill it exactly there. The steps of a takeover (`bpf/handover.rs`):
//! `joining` (stored, nothing of this build attached), `attached` (every
//! library attached, the old build still running), `leaving` (stored, the
//! old build's pins not yet removed), `removed` (the old build's programs
//! gone, `steady` not yet stored). Of the event loop: `read` (records read
//! from the ring and applied, not yet written nor given back to the
//! kernel; at each drain that read any).

/// Whether `GPUMEM_STOP_AT` names `step`. The environment is read once:
/// the event loop asks at every drain.
pub fn armed(step: &str) -> bool {
    static AT: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    AT.get_or_init(|| std::env::var_os("GPUMEM_STOP_AT")).as_ref().is_some_and(|s| s == step)
}

/// Stops the agent at `step` if `GPUMEM_STOP_AT` names it, saying so
/// first with `what` (what it holds there, for the test to read).
pub fn stop_at(step: &str, what: &str) {
    if armed(step) {
        tracing::info!("GPUMEM_STOP_AT: stopping at {step}{what}");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}
