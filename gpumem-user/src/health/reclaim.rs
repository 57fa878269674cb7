//! Emptying the live table's slots of process images that exited or
//! exec'd (`KernelMaps::reclaim_dead`), and having the kernel forget
//! their entries in the hash maps (VMM handles, their mappings,
//! allocations kept in `LIVE`: `bpf/hashed.rs`), and the totals of
//! cgroups that were removed: the kernel releases an image's charges at
//! its exit but cannot walk the maps for its entries, nor tell a cgroup
//! gone, so the agent does, after exits and at most every [`GAP`] (a
//! pod's cgroup goes after its processes' exits, and is found at the
//! sweep after the next exit). The hash
//! maps' walk runs on a thread of its own, so that the event loop drains
//! the ring buffer meanwhile; the dead entries it found come back to the
//! loop, which has the kernel forget them a batch a step
//! ([`FORGETS_PER_STEP`]), for the same reason.
use std::{
    collections::VecDeque,
    path::Path,
    sync::Arc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use gpumem_common::{ns, LiveKey};

use crate::bpf::{
    hashed::{Dead, Hashed, HashedMaps},
    kernel::KernelMaps,
};

/// The least time between two sweeps (each maps the table and reads its
/// 5.8 MB: a few milliseconds).
pub const GAP: Duration = Duration::from_secs(5);

/// The most hash-map entries one health step has the kernel forget (a
/// program run each, 1.5 to 4.5 µs on the bench's host: about 6 to 18 ms
/// of the event loop a step); the rest wait for the next steps, and no
/// walk starts before they are done.
pub const FORGETS_PER_STEP: usize = 1 << 12;

#[derive(Debug, Default)]
pub struct Reclaim {
    /// An image was released since the last sweep.
    due: bool,
    last: Option<Instant>,
    /// A sweep asked for a walk of the hash maps, not started yet (one
    /// under way, dead entries still to forget, or no thread could be
    /// started).
    walk_due: bool,
    /// Slots emptied so far.
    emptied: u64,
    /// Entries the kernel forgot so far: in `LIVE`, in `VMM_MAPPINGS`,
    /// in `CGROUP_USAGE`.
    forgotten: Forgotten,
    /// Handles of their own on the hash maps, shared with a walk's thread
    /// (a walk that panics leaves them here for the next); None in an
    /// agent with no kernel maps (unit tests).
    maps: Option<Arc<HashedMaps>>,
    /// The walk under way, on its thread.
    walk: Option<JoinHandle<Vec<Dead>>>,
    /// Dead entries the last walk found, not yet forgotten, in its order
    /// (mappings first, cgroups' totals last).
    dead: VecDeque<Dead>,
}

/// Entries of exited images, and of removed cgroups, the kernel forgot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Forgotten {
    /// VMM handles and allocations in `LIVE`.
    pub live: u64,
    /// Mappings in `VMM_MAPPINGS`.
    pub mappings: u64,
    /// Removed cgroups' totals (0) in `CGROUP_USAGE`.
    pub cgroups: u64,
}

impl Reclaim {
    /// Sweeps with `maps` for the hash maps' walks.
    pub fn new(maps: HashedMaps) -> Self {
        Self { maps: Some(Arc::new(maps)), ..Self::default() }
    }

    /// A process image was released (an `exit` or `exec` record, or an
    /// exit the agent recovered).
    pub fn released(&mut self) {
        self.due = true;
    }

    /// Takes in what a finished walk found dead and has the kernel forget
    /// at most [`FORGETS_PER_STEP`] of what is waiting (`forget` runs
    /// `forget_dead`: `Tracer::forget_dead`); sweeps the table if an image
    /// was released since the last sweep and the last was at least [`GAP`]
    /// ago; then starts a walk of the hash maps on a thread if a sweep
    /// asked for one, none is under way and nothing is left to forget.
    pub fn step(&mut self, kernel: &mut KernelMaps, forget: impl FnMut(Dead) -> Option<u32>) {
        self.collect();
        let forgotten = self.forgotten.live;
        self.forget_some(forget);
        let swept = self.sweep(kernel);
        self.start_walk();
        // After a sweep, or a walk's last forgets: the earlier build's last
        // may have gone (a look at `LIVE`'s keys: once a walk, not a step).
        if swept || (self.forgotten.live > forgotten && self.dead.is_empty()) {
            old_spill(kernel);
        }
    }

    /// Sweeps the table if an image was released since the last sweep and
    /// the last was at least [`GAP`] ago, and asks for a walk of the hash
    /// maps; whether it did.
    fn sweep(&mut self, kernel: &mut KernelMaps) -> bool {
        if !self.due || self.last.is_some_and(|t| t.elapsed() < GAP) {
            return false;
        }
        (self.due, self.last, self.walk_due) = (false, Some(Instant::now()), true);
        match kernel.reclaim_dead() {
            Ok(n) => self.emptied += n,
            Err(e) => {
                tracing::warn!("emptying the live table's slots of exited processes: {e} (tried again later)")
            }
        }
        true
    }

    /// Starts the walk a sweep asked for, once the last is done and its
    /// dead entries are forgotten.
    fn start_walk(&mut self) {
        if !self.walk_due || self.walk.is_some() || !self.dead.is_empty() {
            return;
        }
        let Some(maps) = self.maps.clone() else { return };
        self.walk_due = false;
        match std::thread::Builder::new().name("gpumem-sweep".into()).spawn(move || walk(&maps)) {
            Ok(handle) => self.walk = Some(handle),
            Err(e) => tracing::warn!(
                "starting the thread that sweeps the hash maps of live entries: {e}; exited \
                 processes' VMM handles and spilled allocations, and removed cgroups' totals, are \
                 left in them until the next sweep (after the next exit) starts one"
            ),
        }
    }

    /// A finished walk's dead entries, queued to be forgotten.
    fn collect(&mut self) {
        let Some(walk) = self.walk.take_if(|w| w.is_finished()) else { return };
        match walk.join() {
            Ok(dead) => self.dead.extend(dead),
            Err(_) => {
                self.due = true;
                tracing::warn!(
                    "the sweep of the hash maps of live entries failed (its thread panicked); \
                     tried again at the next sweep"
                );
            }
        }
    }

    /// Has the kernel forget at most [`FORGETS_PER_STEP`] of the dead
    /// entries waiting, in the walk's order (a program run each).
    fn forget_some(&mut self, mut forget: impl FnMut(Dead) -> Option<u32>) {
        for _ in 0..FORGETS_PER_STEP {
            let Some(entry) = self.dead.pop_front() else { return };
            match (forget(entry), entry) {
                (Some(1), Dead::Mapping(_)) => self.forgotten.mappings += 1,
                (Some(1), Dead::Cgroup(_)) => self.forgotten.cgroups += 1,
                (Some(1), _) => self.forgotten.live += 1,
                // Changed since it was read, or its image's release under
                // way: judged again at the next sweep.
                (Some(_), _) => self.due = true,
                (None, _) => {
                    // The rest would be refused too: the next sweep (after
                    // the next exit) finds them again.
                    let left = 1 + self.dead.len();
                    self.dead.clear();
                    tracing::warn!(
                        "the kernel refused to run the program that forgets exited processes' \
                         entries and removed cgroups' totals ({left} entries left; tried again \
                         after the next exit)"
                    );
                    return;
                }
            }
        }
    }

    /// Hash-map entries of exited images, and removed cgroups' totals,
    /// the kernel forgot so far.
    pub fn forgotten(&self) -> Forgotten {
        self.forgotten
    }

    /// Slots emptied so far.
    pub fn emptied(&self) -> u64 {
        self.emptied
    }
}

/// Clears the mark that has the programs look in `LIVE` for an earlier
/// build's allocations once none is left (`KernelMaps::forget_old_spill`).
fn old_spill(kernel: &mut KernelMaps) {
    match kernel.forget_old_spill() {
        Ok(true) => {
            tracing::info!("the earlier build's live allocations are all gone: the table alone is looked in")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!("looking for the earlier build's live allocations: {e} (tried again later)")
        }
    }
}

/// One walk, on its own thread: reads the hash maps and finds the dead
/// entries (/proc asked for processes without an image; the cgroup2
/// mount walked for the cgroups there are, where some total is 0).
fn walk(maps: &HashedMaps) -> Vec<Dead> {
    let proc_root = Path::new("/proc");
    let hashed = maps.read();
    // Walked after the totals were read: a cgroup charged before that read
    // was there before this walk, so one the walk misses was removed. No
    // certain walk (`present`): none is judged gone.
    let present = match hashed.empty_cgroups.is_empty() {
        true => None,
        false => crate::enrich::cgroup::present(),
    };
    dead(
        hashed,
        |tgid| super::gone::tasks(proc_root, tgid) == super::gone::Tasks::Gone,
        |id| present.as_ref().is_none_or(|ids| ids.contains(&id)),
    )
}

/// The entries in `hashed` that process images which exited or exec'd
/// left (their charges went at their release, but no exit finds them),
/// for the kernel to forget (it checks each again as it removes it):
/// mappings first, so that each is judged by its handle's entry while it
/// is there. An entry is dead where its generation is not its process's
/// current one; a mapping's is its handle's. An entry with no image
/// (generation 0: a multicast handle, one charged while the usage map was
/// full, a mapping whose handle's entry is gone) goes with its process:
/// when it has no usage entry and /proc says it is gone (`process_gone`).
/// Last, each cgroup whose total is 0 and that `cgroup_exists` says is
/// gone.
pub fn dead(
    hashed: Hashed,
    process_gone: impl Fn(u32) -> bool,
    cgroup_exists: impl Fn(u64) -> bool,
) -> Vec<Dead> {
    let Hashed { live, mappings, current, empty_cgroups } = hashed;
    let dead = |tgid: u32, generation: u64| match current.get(&tgid) {
        Some(&now) => generation != 0 && generation != now,
        None => generation != 0 || process_gone(tgid),
    };
    let image_of = |key: LiveKey, handle: u64| {
        let owner = LiveKey { tgid: key.tgid, ns: ns::VMM_HANDLE, addr: handle };
        live.get(&owner).copied().unwrap_or(0)
    };
    let mut gone: Vec<Dead> = mappings
        .into_iter()
        .filter(|&(key, handle)| dead(key.tgid, image_of(key, handle)))
        .map(|(key, _)| Dead::Mapping(key))
        .collect();
    gone.extend(
        live.iter()
            .filter(|&(key, &generation)| dead(key.tgid, generation))
            .map(|(&key, &generation)| Dead::Allocation { key, generation }),
    );
    gone.extend(empty_cgroups.into_iter().filter(|&id| !cgroup_exists(id)).map(Dead::Cgroup));
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tgid: u32, ns: u32, addr: u64) -> LiveKey {
        LiveKey { tgid, ns, addr }
    }

    #[test]
    fn forgets_go_a_batch_a_step_in_the_walks_order_and_a_refusal_leaves_the_rest_to_the_next_sweep() {
        let mut r = Reclaim::default();
        let n = FORGETS_PER_STEP as u64 + 10;
        let entry = |i: u64| match i {
            0..5 => Dead::Mapping(key(1, ns::VMM_MAPPING, i)),
            5..8 => Dead::Cgroup(100 + i),
            _ => Dead::Allocation { key: key(1, ns::VMM_HANDLE, i), generation: 5 },
        };
        r.dead.extend((0..n).map(entry));
        let mut asked = Vec::new();
        r.forget_some(|d| {
            asked.push(d);
            Some(1)
        });
        assert!(asked.iter().copied().eq((0..FORGETS_PER_STEP as u64).map(entry)), "in order, a batch");
        let forgotten = Forgotten { live: FORGETS_PER_STEP as u64 - 8, mappings: 5, cgroups: 3 };
        assert_eq!((r.forgotten(), r.dead.len(), r.due), (forgotten, 10, false));

        // Changed since the walk (0: not forgotten): judged at the next sweep.
        r.forget_some(|_| Some(0));
        assert_eq!((r.forgotten(), r.dead.len(), r.due), (forgotten, 0, true));

        // Refused: nothing forgotten, nothing left waiting.
        r.dead.extend((0..3).map(entry));
        let mut runs = 0;
        r.forget_some(|_| {
            runs += 1;
            None
        });
        assert_eq!((runs, r.forgotten(), r.dead.len()), (1, forgotten, 0));
    }

    #[test]
    fn no_empty_cgroup_is_dead_where_none_can_be_told_removed() {
        // What the sweep passes where the cgroup2 tree cannot be walked
        // whole (`enrich::cgroup::present` is None): every cgroup there.
        let hashed = Hashed { empty_cgroups: vec![1, 41, 42], ..Hashed::default() };
        assert_eq!(dead(hashed, |_| true, |_| true), []);
    }

    #[test]
    fn entries_of_images_that_are_not_current_are_dead_mappings_first_and_removed_empty_cgroups_last() {
        // Process 1 runs image 10 (it exec'd from image 5); process 2 has
        // exited (no usage entry); process 3 runs with nothing charged.
        // Cgroups 1 and 40 hold nothing and are there; 41 and 42 hold
        // nothing and were removed (a cgroup holding bytes is never read
        // as empty, whether there or not).
        let live = [
            (key(1, ns::VMM_HANDLE, 0xa), 10),
            (key(1, ns::VMM_HANDLE, 0xb), 5),
            (key(1, ns::DEVICE_PTR, 0xc), 5),
            (key(2, ns::VMM_HANDLE, 0xd), 20),
            (key(3, ns::VMM_HANDLE, 0xe), 0),
            (key(2, ns::VMM_HANDLE, 0xf), 0),
        ];
        let mappings = vec![
            (key(1, ns::VMM_MAPPING, 0x100), 0xa),
            (key(1, ns::VMM_MAPPING, 0x200), 0xb),
            (key(2, ns::VMM_MAPPING, 0x300), 0xd),
            (key(1, ns::VMM_MAPPING, 0x400), 0x99), // handle's entry gone
            (key(3, ns::VMM_MAPPING, 0x500), 0xe),
        ];
        let hashed = Hashed {
            live: live.into_iter().collect(),
            mappings,
            current: [(1, 10)].into_iter().collect(),
            empty_cgroups: vec![41, 1, 40, 42],
        };
        let gone = dead(hashed, |tgid| tgid == 2, |id| id == 1 || id == 40);
        let (gone, cgroups) = gone.split_at(gone.len() - 2);
        assert_eq!(cgroups, [Dead::Cgroup(41), Dead::Cgroup(42)], "the removed empty cgroups, last");
        let (maps, mut allocations): (Vec<Dead>, Vec<Dead>) =
            gone.iter().partition(|g| matches!(g, Dead::Mapping(_)));
        assert_eq!(
            maps,
            [Dead::Mapping(key(1, ns::VMM_MAPPING, 0x200)), Dead::Mapping(key(2, ns::VMM_MAPPING, 0x300))]
        );
        assert!(gone[..2].iter().all(|g| matches!(g, Dead::Mapping(_))), "mappings first");
        allocations.sort_by_key(|g| match g {
            Dead::Allocation { key, .. } => key.addr,
            _ => 0,
        });
        let expected = [
            Dead::Allocation { key: key(1, ns::VMM_HANDLE, 0xb), generation: 5 },
            Dead::Allocation { key: key(1, ns::DEVICE_PTR, 0xc), generation: 5 },
            Dead::Allocation { key: key(2, ns::VMM_HANDLE, 0xd), generation: 20 },
            Dead::Allocation { key: key(2, ns::VMM_HANDLE, 0xf), generation: 0 },
        ];
        assert_eq!(allocations, expected);
    }
}
