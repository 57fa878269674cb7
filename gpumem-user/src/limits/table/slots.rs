//! Which `LIMITS` slots hold what: a rule's head, a device's slot of a
//! rule that limits each device on its own, or nothing. A rule takes a run
//! of slots (1, or 1 + its span); a cleared rule's run is used again once
//! nothing counts under it any more (see [`Slots::reclaim`]).
use std::time::{Duration, Instant};

use aya::maps::{Array, MapData};
use gpumem_common::{LimitState, MAX_LIMITS};

use super::installed::Installed;

/// How long a cleared rule's run counts nothing before it is used again:
/// a call that found the rule in the index just before it was cleared has
/// reserved or given back by then (its entry program runs in
/// microseconds), and records naming the slot have been read.
pub const GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub enum Slot {
    Free,
    /// A rule, in force (`active`) or cleared; `idle`: since when a
    /// cleared rule has counted nothing.
    Head {
        rule: Installed,
        active: bool,
        idle: Option<Instant>,
    },
    /// Device `device`'s slot of the rule headed at `head`.
    Device {
        head: u32,
        device: u32,
    },
}

/// The slots, by index.
#[derive(Debug, Default)]
pub struct Slots {
    slots: Vec<Slot>,
}

impl Slots {
    pub fn get(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize)
    }

    pub fn get_mut(&mut self, slot: u32) -> Option<&mut Slot> {
        self.slots.get_mut(slot as usize)
    }

    /// The first run of `len` free slots (past the last used one if none
    /// is free between), or None when the kernel's array has no room.
    pub fn find(&self, len: u32) -> Option<u32> {
        let mut start = 0;
        let mut free = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if matches!(s, Slot::Free) {
                free += 1;
                if free == len {
                    return Some(start);
                }
            } else {
                start = i as u32 + 1;
                free = 0;
            }
        }
        (start + len <= MAX_LIMITS).then_some(start)
    }

    /// Puts `rule` (in force) at its slot and its devices' after it.
    pub fn take(&mut self, rule: Installed) {
        self.put(rule, true);
    }

    /// Puts `rule`, in force or not, at its slot and its devices' after it.
    pub fn put(&mut self, rule: Installed, active: bool) {
        let (head, span) = (rule.slot, rule.span());
        let end = (head + 1 + span) as usize;
        if self.slots.len() < end {
            self.slots.resize(end, Slot::Free);
        }
        for device in 0..span {
            self.slots[(head + 1 + device) as usize] = Slot::Device { head, device };
        }
        self.slots[head as usize] = Slot::Head { rule, active, idle: None };
    }

    /// Every rule's head, with whether it is in force.
    pub fn heads(&self) -> impl Iterator<Item = (&Installed, bool)> {
        self.slots.iter().filter_map(|s| match s {
            Slot::Head { rule, active, .. } => Some((rule, *active)),
            _ => None,
        })
    }

    /// The slots of the rule headed at `head` (itself and its devices').
    pub fn run(&self, head: u32) -> std::ops::Range<u32> {
        match self.get(head) {
            Some(Slot::Head { rule, .. }) => head..head + 1 + rule.span(),
            _ => head..head,
        }
    }

    /// The runs of cleared rules to use again, now: those whose slots
    /// `counts` (what the kernel counts in a slot, with its base) says
    /// count nothing since [`GRACE`] ago. A run counting something again
    /// starts its wait over.
    pub fn reclaim(&mut self, now: Instant, counts: impl Fn(u32) -> u64) -> Vec<u32> {
        let heads: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&s| matches!(self.get(s), Some(Slot::Head { active: false, .. })))
            .collect();
        let mut freed = Vec::new();
        for head in heads {
            let idle = self.run(head).all(|s| counts(s) == 0);
            let Some(Slot::Head { idle: since, .. }) = self.get_mut(head) else { continue };
            match (idle, *since) {
                (false, _) => *since = None,
                (true, None) => *since = Some(now),
                (true, Some(t)) if now.duration_since(t) >= GRACE => freed.push(head),
                (true, Some(_)) => {}
            }
        }
        for &head in &freed {
            for s in self.run(head) {
                self.slots[s as usize] = Slot::Free;
            }
        }
        freed
    }
}

/// What the kernel counts in `slot` of `state` now, with its base in
/// `base` (0 for what cannot be read).
pub fn counted(state: &Array<MapData, LimitState>, base: &Array<MapData, u64>, slot: u32) -> u64 {
    let usage = state.get(&slot, 0).map(|s| s.usage).unwrap_or(0);
    usage.wrapping_add(base.get(&slot, 0).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::policy::Limit;

    fn rule(slot: u32, each: Option<usize>) -> Installed {
        let limit = Limit::parse("cgroup:/a=1G").unwrap();
        Installed::new(slot, limit, each.map(|n| vec![Some(1); n]))
    }

    #[test]
    fn runs_fit_in_the_free_slots_first() {
        let mut s = Slots::default();
        assert_eq!(s.find(1), Some(0));
        s.take(rule(0, None));
        s.take(rule(1, Some(2)));
        assert_eq!(s.find(1), Some(4));
        assert_eq!(s.run(1), 1..4);
        assert!(matches!(s.get(3), Some(Slot::Device { head: 1, device: 1 })));
        assert_eq!(s.find(MAX_LIMITS), None);
    }

    #[test]
    fn a_cleared_run_is_freed_after_counting_nothing_for_the_grace() {
        let mut s = Slots::default();
        s.take(rule(0, Some(2)));
        s.take(rule(3, None));
        let Some(Slot::Head { active, .. }) = s.get_mut(0) else { panic!() };
        *active = false;
        let t0 = Instant::now();
        // Device 1 still counts: the wait has not begun.
        assert!(s.reclaim(t0, |slot| u64::from(slot == 2)).is_empty());
        assert!(s.reclaim(t0, |_| 0).is_empty());
        assert!(s.reclaim(t0 + GRACE / 2, |_| 0).is_empty());
        // Counting again starts the wait over.
        assert!(s.reclaim(t0 + GRACE, |slot| u64::from(slot == 1)).is_empty());
        assert!(s.reclaim(t0 + GRACE, |_| 0).is_empty());
        assert_eq!(s.reclaim(t0 + 2 * GRACE, |_| 0), vec![0]);
        assert_eq!(s.find(3), Some(0));
        assert!(matches!(s.get(3), Some(Slot::Head { active: true, .. })), "the rule in force stays");
    }
}
