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
    read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
    context: impl FnOnce() -> String,
) -> T {
    let until = Instant::now() + DEADLINE;
    poll_until(what, read, done, context, |_| until)
}

/// [`poll`] for a state that moves toward `done` (records being read): the
/// deadline is [`DEADLINE`] without a change of state, so a reader slowed
/// down (a debug agent under emulation, a backlog of minutes) is waited
/// for while it moves, and one that stops fails as soon as with `poll`;
/// never longer than [`MOVING_AT_MOST`] in all.
pub fn poll_moving<T: std::fmt::Debug + PartialEq + Clone>(
    what: &str,
    read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
    context: impl FnOnce() -> String,
) -> T {
    let mut moving = Moving::new();
    let what = format!("{what} ({DEADLINE:?} without a change, {MOVING_AT_MOST:?} at most)");
    poll_until(&what, read, done, context, |state| moving.until(state))
}

/// The longest [`poll_moving`] waits, however its state moves.
pub const MOVING_AT_MOST: Duration = Duration::from_secs(300);

/// The deadline of a wait on a state that moves: [`DEADLINE`] after the
/// state last changed, [`MOVING_AT_MOST`] after the wait began at most.
pub struct Moving<T> {
    started: Instant,
    last: Option<T>,
    until: Instant,
}

impl<T: PartialEq + Clone> Moving<T> {
    pub fn new() -> Self {
        let started = Instant::now();
        Self { started, last: None, until: started + DEADLINE }
    }

    /// The deadline, given the state just read.
    pub fn until(&mut self, state: &T) -> Instant {
        if self.last.as_ref() != Some(state) {
            self.last = Some(state.clone());
            self.until = (Instant::now() + DEADLINE).min(self.started + MOVING_AT_MOST);
        }
        self.until
    }
}

impl<T: PartialEq + Clone> Default for Moving<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The loop of [`poll`] and [`poll_moving`]: the test fails once the time
/// passes what `deadline` says for the state just read.
fn poll_until<T: std::fmt::Debug>(
    what: &str,
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
    context: impl FnOnce() -> String,
    mut deadline: impl FnMut(&T) -> Instant,
) -> T {
    let started = Instant::now();
    loop {
        let state = read();
        if done(&state) {
            return state;
        }
        if Instant::now() > deadline(&state) {
            let waited = started.elapsed();
            panic!("timed out waiting for {what} after {waited:?}; last seen: {state:#?}\n{}", context());
        }
        std::thread::sleep(EVERY);
    }
}

/// Waits until `cond` holds.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
    poll(what, &cond, |&ok| ok, String::new);
}
