//! The latest limit decisions and failed allocations, for `gpumem top`:
//! a small ring filled as the records pass through the agent, the oldest
//! pushed out. Those records are rare (a refused or capped call), so one
//! entry each costs nothing on the allocation path.
use std::collections::VecDeque;

use crate::output::{Line, RecentEvent};

/// How many the agent keeps.
pub const KEEP: usize = 32;

#[derive(Debug, Default)]
pub struct Recent {
    ring: VecDeque<RecentEvent>,
}

impl Recent {
    /// Keeps `line` if `top` lists its kind.
    pub fn saw(&mut self, line: &Line) {
        let Some(event) = RecentEvent::of(line) else { return };
        if self.ring.len() == KEEP {
            self.ring.pop_front();
        }
        self.ring.push_back(event);
    }

    /// Those kept, oldest first.
    pub fn list(&self) -> Vec<RecentEvent> {
        self.ring.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        decode::{Body, Change, Decision, Event, Origin, Taken},
        output::{EventLine, LimitLine, RecentKind},
    };

    fn origin(pid: u32, ts_ns: u64) -> Origin {
        Origin { ts_ns, pid, tid: pid, cgroup_id: 3, comm: "job".into(), api: 1 }
    }

    fn failure(pid: u32, ts_ns: u64) -> Line {
        let c = Change { size: 4096, result: Some(2), device: Some(0), ..Change::default() };
        let e = Event { origin: origin(pid, ts_ns), body: Body::AllocFailed(c) };
        Line::Event(EventLine::new(&e, Some("/a".into()), None).unwrap())
    }

    #[test]
    fn keeps_decisions_and_failures_only_and_at_most_keep() {
        let mut r = Recent::default();
        let d = Decision { slot: 0, request: 10, usage: 90, limit: 95, taken: Taken::Deny };
        let limit = LimitLine::new(&origin(7, 1), &d, false, None, ("pid:7".into(), "deny".into()));
        r.saw(&Line::Limit(limit));
        let alloc = Event { origin: origin(7, 2), body: Body::Alloc(Change::default()) };
        r.saw(&Line::Event(EventLine::new(&alloc, None, None).unwrap()));
        r.saw(&failure(8, 3));
        let kept = r.list();
        assert_eq!(kept.len(), 2, "the alloc is not kept");
        assert_eq!(
            (kept[0].event, kept[0].limit.as_deref(), kept[0].bytes),
            (RecentKind::Limit, Some("pid:7"), 10)
        );
        assert_eq!(kept[0].action.as_deref(), Some("deny"));
        assert_eq!(
            (kept[1].event, kept[1].result, kept[1].device),
            (RecentKind::AllocFailed, Some(2), Some(0))
        );
        for ts in 0..(KEEP as u64 + 5) {
            r.saw(&failure(9, 100 + ts));
        }
        let kept = r.list();
        assert_eq!(kept.len(), KEEP);
        assert_eq!(kept.first().unwrap().ts_ns, 105, "the oldest went first");
        assert_eq!(kept.last().unwrap().ts_ns, 100 + KEEP as u64 + 4);
    }
}
