//! Which threads' calls gpumem's own `deny` refused, until their returns
//! are read: such a return is an `alloc_failed` with result 2 that the
//! driver never saw, so it is neither a driver's refusal (the metrics
//! count those) nor a reason to name the device's holders. A `limit`
//! record comes before its call's return in the ring (one thread, one
//! order), so a thread is remembered from one to the other.
use crate::fast_hash::HashSet;

/// How many threads are remembered before they are forgotten at once
/// (returns lost from the ring would otherwise keep theirs forever).
const KEPT: usize = 4096;

#[derive(Debug, Default)]
pub struct Denied {
    threads: HashSet<u32>,
}

impl Denied {
    /// Thread `tid`'s call was denied.
    pub fn saw(&mut self, tid: u32) {
        if self.threads.len() >= KEPT {
            self.threads.clear();
        }
        self.threads.insert(tid);
    }

    /// Thread `tid`'s call returned: whether it was the denied one.
    pub fn returned(&mut self, tid: u32) -> bool {
        !self.threads.is_empty() && self.threads.remove(&tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_denied_until_its_return() {
        let mut d = Denied::default();
        assert!(!d.returned(7));
        d.saw(7);
        assert!(!d.returned(8), "another thread");
        assert!(d.returned(7));
        assert!(!d.returned(7), "once");
    }
}
