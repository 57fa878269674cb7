//! Waiting for a condition, never for a time: every wait in the tests is
//! [`poll`], which reads a state until it satisfies a condition or the
//! deadline passes, and then fails the test with the last state read.
use std::time::{Duration, Instant};

/// How long any one condition may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// How long between two reads.
const EVERY: Duration = Duration::from_millis(20);

/// Reads `read` until `done` holds for what it returned, and returns that;
/// after [`DEADLINE`] fails the test, saying `what` it waited for, the
/// last state read and `context()` (what else helps to see why).
pub fn poll<T: std::fmt::Debug>(
    what: &str,
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
    context: impl FnOnce() -> String,
) -> T {
    let until = Instant::now() + DEADLINE;
    loop {
        let state = read();
        if done(&state) {
            return state;
        }
        if Instant::now() > until {
            panic!("timed out waiting for {what}; last seen: {state:#?}\n{}", context());
        }
        std::thread::sleep(EVERY);
    }
}

/// Waits until `cond` holds.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    poll(what, &cond, |&ok| ok, String::new);
}
