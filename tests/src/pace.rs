//! A load generator's pacing: one caller's share of a rate of calls.

use std::time::{Duration, Instant};

/// One caller's share of `rate` calls a second among `callers`: the n-th
/// call waits for its turn, n periods after the start (absolute turns, so
/// that a late call catches up at once).
pub struct Pace {
    period: Option<Duration>,
    start: Instant,
    calls: u32,
}

impl Pace {
    /// `rate` 0: no pacing.
    pub fn new(rate: u64, callers: usize) -> Self {
        let period = (rate > 0).then(|| Duration::from_secs(callers as u64) / rate as u32);
        Self { period, start: Instant::now(), calls: 0 }
    }

    /// Waits for the next call's turn.
    pub fn next(&mut self) {
        let Some(period) = self.period else { return };
        let turn = self.start + period * self.calls;
        self.calls += 1;
        if let Some(wait) = turn.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}
