//! Emptying the live table's slots of process images that exited or
//! exec'd (`KernelMaps::reclaim_dead`): the kernel releases an image's
//! charges at its exit but cannot walk the table for its allocations, so
//! the agent does, after exits and at most every [`GAP`].
use std::time::{Duration, Instant};

use crate::bpf::kernel::KernelMaps;

/// The least time between two sweeps (each maps the table and reads its
/// 5.8 MB: a few milliseconds).
pub const GAP: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub struct Reclaim {
    /// An image was released since the last sweep.
    due: bool,
    last: Option<Instant>,
    /// Slots emptied so far.
    emptied: u64,
}

impl Reclaim {
    /// A process image was released (an `exit` or `exec` record, or an
    /// exit the agent recovered).
    pub fn released(&mut self) {
        self.due = true;
    }

    /// Sweeps if an image was released since the last sweep and the last
    /// was at least [`GAP`] ago.
    pub fn step(&mut self, kernel: &mut KernelMaps) {
        if !self.due || self.last.is_some_and(|t| t.elapsed() < GAP) {
            return;
        }
        (self.due, self.last) = (false, Some(Instant::now()));
        match kernel.reclaim_dead() {
            Ok(n) => self.emptied += n,
            Err(e) => {
                tracing::warn!("emptying the live table's slots of exited processes: {e} (tried again later)")
            }
        }
        match kernel.forget_old_spill() {
            Ok(true) => tracing::info!(
                "the earlier build's live allocations are all gone: the table alone is looked in"
            ),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("looking for the earlier build's live allocations: {e} (tried again later)")
            }
        }
    }

    /// Slots emptied so far.
    pub fn emptied(&self) -> u64 {
        self.emptied
    }
}
