//! Waiting for a condition, never for a time: every wait in the tests is
//! [`poll`], which reads a state until it satisfies a condition or the
//! deadline passes, and then fails the test with the last state read, or
//! [`poll_moving`], whose deadline counts from the last change of state.
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

/// [`poll`] for a state that moves toward `done` (records being read): the
/// deadline is [`DEADLINE`] without a change of state, so a reader slowed
/// down (a debug agent under emulation, a backlog of minutes) is waited
/// for while it moves, and one that stops fails as soon as with `poll`;
/// never longer than [`MOVING_AT_MOST`] in all.
pub fn poll_moving<T: std::fmt::Debug + PartialEq + Clone>(
    what: &str,
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
    context: impl FnOnce() -> String,
) -> T {
    let started = Instant::now();
    let (mut last, mut until) = (None, started + DEADLINE);
    loop {
        let state = read();
        if done(&state) {
            return state;
        }
        let now = Instant::now();
        if last.as_ref() != Some(&state) {
            last = Some(state.clone());
            until = (now + DEADLINE).min(started + MOVING_AT_MOST);
        }
        if now > until {
            let waited = now - started;
            panic!(
                "timed out waiting for {what} after {waited:?} ({DEADLINE:?} without a change, or {MOVING_AT_MOST:?} in all); last seen: {state:#?}\n{}",
                context()
            );
        }
        std::thread::sleep(EVERY);
    }
}

/// The longest [`poll_moving`] waits, however its state moves.
pub const MOVING_AT_MOST: Duration = Duration::from_secs(300);

/// Waits until `cond` holds.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    poll(what, &cond, |&ok| ok, String::new);
}
