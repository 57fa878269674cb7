//! Where a start's time goes: with `GPUMEM_LOG=debug`, each step of the
//! start says when it ended, in ms since `gpumem run` began, and how long
//! it took (the verification of each program is told apart by
//! `bpf/parallel_load.rs`).
use std::{sync::OnceLock, time::Instant};

static BEGAN: OnceLock<Instant> = OnceLock::new();
static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);

/// The start begins (called first thing in `gpumem run`).
pub fn begin() {
    let now = *BEGAN.get_or_init(Instant::now);
    *LAST.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
}

/// `step` has ended: logged at debug level with its own duration.
pub fn done(step: &str) {
    let Some(&began) = BEGAN.get() else { return };
    let now = Instant::now();
    let last = LAST.lock().unwrap_or_else(|e| e.into_inner()).replace(now).unwrap_or(began);
    tracing::debug!(
        "start: {step} took {:.1} ms (at {:.1} ms)",
        (now - last).as_secs_f64() * 1e3,
        (now - began).as_secs_f64() * 1e3
    );
}
