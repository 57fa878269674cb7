//! Where a start's time goes: with `GPUMEM_LOG=debug`, each step of the
//! start says how long it took and when it ended, in ms since `gpumem run`
//! began (the verification of each program is told apart by
//! `bpf/parallel_load.rs`).
use std::{sync::Mutex, time::Instant};

/// When the start began, and when its last step ended.
static CLOCK: Mutex<Option<(Instant, Instant)>> = Mutex::new(None);

/// The start begins (called first thing in `gpumem run`).
pub fn begin() {
    let now = Instant::now();
    *CLOCK.lock().unwrap_or_else(|e| e.into_inner()) = Some((now, now));
}

/// `step` has ended: logged at debug level with its own duration.
pub fn done(step: &str) {
    let now = Instant::now();
    let Some((began, last)) = CLOCK.lock().unwrap_or_else(|e| e.into_inner()).as_mut().map(|(b, l)| {
        let last = std::mem::replace(l, now);
        (*b, last)
    }) else {
        return;
    };
    tracing::debug!(
        "start: {step} took {:.1} ms (at {:.1} ms)",
        (now - last).as_secs_f64() * 1e3,
        (now - began).as_secs_f64() * 1e3
    );
}
