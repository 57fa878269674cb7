//! Emptying the live table's slots of process images that exited or
//! exec'd (`KernelMaps::reclaim_dead`), and having the kernel forget
//! their entries in the hash maps (VMM handles, their mappings,
//! allocations kept in `LIVE`: `bpf/hashed.rs`): the kernel releases an
//! image's charges at its exit but cannot walk the maps for its entries,
//! so the agent does, after exits and at most every [`GAP`]. The hash
//! maps' walk runs on a thread of its own, so that the event loop drains
//! the ring buffer meanwhile; the dead entries it found come back at a
//! later step, where the kernel is asked to forget them.
use std::{
    path::Path,
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

/// The most hash-map entries one sweep has the kernel forget (a program
/// run each, a few microseconds): the rest wait for the next sweep.
pub const FORGETS_PER_SWEEP: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct Reclaim {
    /// An image was released since the last sweep.
    due: bool,
    last: Option<Instant>,
    /// Slots emptied so far.
    emptied: u64,
    /// Hash-map entries the kernel forgot so far: in `LIVE`, in
    /// `VMM_MAPPINGS`.
    forgotten: Forgotten,
    walker: Walker,
}

/// Entries of exited images the kernel forgot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Forgotten {
    /// VMM handles and allocations in `LIVE`.
    pub live: u64,
    /// Mappings in `VMM_MAPPINGS`.
    pub mappings: u64,
}

/// Where the hash maps' handles are.
#[derive(Default)]
enum Walker {
    /// Still with the kernel's maps (taken at the first sweep).
    #[default]
    Unclaimed,
    /// Here, between walks.
    Ready(Box<HashedMaps>),
    /// Out on a walk's thread, which hands them back with the dead
    /// entries it found.
    Busy(JoinHandle<(Box<HashedMaps>, Vec<Dead>)>),
    /// Gone (no thread could be started, or a walk panicked): the table
    /// alone is swept; said when it happened.
    Lost,
}

impl std::fmt::Debug for Walker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Walker::Unclaimed => "Unclaimed",
            Walker::Ready(_) => "Ready",
            Walker::Busy(_) => "Busy",
            Walker::Lost => "Lost",
        })
    }
}

impl Reclaim {
    /// A process image was released (an `exit` or `exec` record, or an
    /// exit the agent recovered).
    pub fn released(&mut self) {
        self.due = true;
    }

    /// Has the kernel forget what a finished walk found dead (`forget`
    /// runs `forget_dead`: `Tracer::forget_dead`), then sweeps if an image
    /// was released since the last sweep, the last was at least [`GAP`]
    /// ago and its walk is done: the table here, the hash maps on a
    /// thread.
    pub fn step(&mut self, kernel: &mut KernelMaps, forget: impl FnMut(Dead) -> Option<u32>) {
        let forgotten = self.forgotten.live;
        self.collect(forget);
        // After a sweep, or forgets: the earlier build's last may have gone.
        if self.sweep(kernel) || self.forgotten.live > forgotten {
            old_spill(kernel);
        }
    }

    /// Sweeps if an image was released since the last sweep, the last was
    /// at least [`GAP`] ago and its walk is done; whether it did.
    fn sweep(&mut self, kernel: &mut KernelMaps) -> bool {
        let walking = matches!(self.walker, Walker::Busy(_));
        if !self.due || walking || self.last.is_some_and(|t| t.elapsed() < GAP) {
            return false;
        }
        (self.due, self.last) = (false, Some(Instant::now()));
        match kernel.reclaim_dead() {
            Ok(n) => self.emptied += n,
            Err(e) => {
                tracing::warn!("emptying the live table's slots of exited processes: {e} (tried again later)")
            }
        }
        if matches!(self.walker, Walker::Unclaimed) {
            self.walker = kernel.hashed_maps().map_or(Walker::Lost, |m| Walker::Ready(Box::new(m)));
        }
        if let Walker::Ready(maps) = std::mem::replace(&mut self.walker, Walker::Lost) {
            match std::thread::Builder::new().name("gpumem-sweep".into()).spawn(move || walk(maps)) {
                Ok(handle) => self.walker = Walker::Busy(handle),
                Err(e) => tracing::warn!(
                    "starting the thread that sweeps the hash maps of live entries: {e}; exited \
                     processes' VMM handles and spilled allocations are no longer forgotten \
                     (restart the agent)"
                ),
            }
        }
        true
    }

    /// A finished walk's maps back, and at most [`FORGETS_PER_SWEEP`] of
    /// the dead entries it found forgotten (a program run each, a few
    /// microseconds).
    fn collect(&mut self, mut forget: impl FnMut(Dead) -> Option<u32>) {
        if !matches!(&self.walker, Walker::Busy(h) if h.is_finished()) {
            return;
        }
        let Walker::Busy(handle) = std::mem::replace(&mut self.walker, Walker::Lost) else { return };
        let Ok((maps, dead)) = handle.join() else {
            tracing::warn!(
                "the sweep of the hash maps of live entries failed; exited processes' VMM handles \
                 and spilled allocations are no longer forgotten (restart the agent)"
            );
            return;
        };
        self.walker = Walker::Ready(maps);
        if dead.len() > FORGETS_PER_SWEEP {
            self.due = true; // the rest at the next sweep
        }
        let mut refused = 0u64;
        for entry in dead.into_iter().take(FORGETS_PER_SWEEP) {
            match (forget(entry), entry) {
                (Some(1), Dead::Mapping(_)) => self.forgotten.mappings += 1,
                (Some(1), _) => self.forgotten.live += 1,
                // Changed since it was read, or its image's release under
                // way: judged again at the next sweep.
                (Some(_), _) => self.due = true,
                (None, _) => refused += 1,
            }
        }
        if refused > 0 {
            tracing::warn!(
                "the kernel refused to run the program that forgets exited processes' entries \
                 ({refused} entries left; tried again after the next exit)"
            );
        }
    }

    /// Hash-map entries of exited images the kernel forgot so far.
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
/// entries (/proc asked for processes without an image).
fn walk(maps: Box<HashedMaps>) -> (Box<HashedMaps>, Vec<Dead>) {
    let proc_root = Path::new("/proc");
    let dead = dead(maps.read(), |tgid| super::gone::tasks(proc_root, tgid) == super::gone::Tasks::Gone);
    (maps, dead)
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
pub fn dead(hashed: Hashed, process_gone: impl Fn(u32) -> bool) -> Vec<Dead> {
    let Hashed { live, mappings, current } = hashed;
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
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tgid: u32, ns: u32, addr: u64) -> LiveKey {
        LiveKey { tgid, ns, addr }
    }

    #[test]
    fn entries_of_images_that_are_not_current_are_dead_and_mappings_come_first() {
        // Process 1 runs image 10 (it exec'd from image 5); process 2 has
        // exited (no usage entry); process 3 runs with nothing charged.
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
        let hashed =
            Hashed { live: live.into_iter().collect(), mappings, current: [(1, 10)].into_iter().collect() };
        let gone = dead(hashed, |tgid| tgid == 2);
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
