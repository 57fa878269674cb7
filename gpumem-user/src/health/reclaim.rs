//! Emptying the live table's slots of process images that exited or
//! exec'd (`KernelMaps::reclaim_dead`), and having the kernel forget
//! their entries in the hash maps (`KernelMaps::dead_hashed`: VMM handles,
//! their mappings, allocations kept in `LIVE`): the kernel releases an
//! image's charges at its exit but cannot walk the maps for its entries,
//! so the agent does, after exits and at most every [`GAP`].
use std::{
    path::Path,
    time::{Duration, Instant},
};

use gpumem_common::{ns, LiveKey};

use crate::bpf::{
    kernel::{Hashed, KernelMaps},
    Gone,
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
}

/// Entries of exited images the kernel forgot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Forgotten {
    /// VMM handles and allocations in `LIVE`.
    pub live: u64,
    /// Mappings in `VMM_MAPPINGS`.
    pub mappings: u64,
}

impl Reclaim {
    /// A process image was released (an `exit` or `exec` record, or an
    /// exit the agent recovered).
    pub fn released(&mut self) {
        self.due = true;
    }

    /// Sweeps if an image was released since the last sweep and the last
    /// was at least [`GAP`] ago; `forget` runs the kernel's program that
    /// forgets a hash-map entry (`Tracer::release_gone`).
    pub fn step(&mut self, kernel: &mut KernelMaps, mut forget: impl FnMut(Gone) -> Option<u32>) {
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
        let proc_root = Path::new("/proc");
        let dead =
            dead(kernel.hashed(), |tgid| super::gone::tasks(proc_root, tgid) == super::gone::Tasks::Gone);
        if dead.len() > FORGETS_PER_SWEEP {
            self.due = true; // the rest at the next sweep
        }
        let mut refused = 0u64;
        for gone in dead.into_iter().take(FORGETS_PER_SWEEP) {
            match (forget(gone), gone) {
                (Some(1), Gone::Mapping(_)) => self.forgotten.mappings += 1,
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

    /// Hash-map entries of exited images the kernel forgot so far.
    pub fn forgotten(&self) -> Forgotten {
        self.forgotten
    }

    /// Slots emptied so far.
    pub fn emptied(&self) -> u64 {
        self.emptied
    }
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
pub fn dead(hashed: Hashed, process_gone: impl Fn(u32) -> bool) -> Vec<Gone> {
    let Hashed { live, mappings, current } = hashed;
    let dead = |tgid: u32, generation: u64| match current.get(&tgid) {
        Some(&now) => generation != 0 && generation != now,
        None => generation != 0 || process_gone(tgid),
    };
    let image_of = |key: LiveKey, handle: u64| {
        let owner = LiveKey { tgid: key.tgid, ns: ns::VMM_HANDLE, addr: handle };
        live.get(&owner).map_or(0, |h| h.generation)
    };
    let mut gone: Vec<Gone> = mappings
        .into_iter()
        .filter(|&(key, handle)| dead(key.tgid, image_of(key, handle)))
        .map(|(key, _)| Gone::Mapping(key))
        .collect();
    gone.extend(
        live.iter()
            .filter(|(key, a)| dead(key.tgid, a.generation))
            .map(|(&key, a)| Gone::Allocation { key, generation: a.generation }),
    );
    gone
}

#[cfg(test)]
mod tests {
    use gpumem_common::LiveAlloc;

    use super::*;

    fn key(tgid: u32, ns: u32, addr: u64) -> LiveKey {
        LiveKey { tgid, ns, addr }
    }

    fn at(generation: u64) -> LiveAlloc {
        LiveAlloc { generation, ..LiveAlloc::default() }
    }

    #[test]
    fn entries_of_images_that_are_not_current_are_dead_and_mappings_come_first() {
        // Process 1 runs image 10 (it exec'd from image 5); process 2 has
        // exited (no usage entry); process 3 runs with nothing charged.
        let live = [
            (key(1, ns::VMM_HANDLE, 0xa), at(10)),
            (key(1, ns::VMM_HANDLE, 0xb), at(5)),
            (key(1, ns::DEVICE_PTR, 0xc), at(5)),
            (key(2, ns::VMM_HANDLE, 0xd), at(20)),
            (key(3, ns::VMM_HANDLE, 0xe), at(0)),
            (key(2, ns::VMM_HANDLE, 0xf), at(0)),
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
        let (maps, mut allocations): (Vec<Gone>, Vec<Gone>) =
            gone.iter().partition(|g| matches!(g, Gone::Mapping(_)));
        assert_eq!(
            maps,
            [Gone::Mapping(key(1, ns::VMM_MAPPING, 0x200)), Gone::Mapping(key(2, ns::VMM_MAPPING, 0x300))]
        );
        assert!(gone[..2].iter().all(|g| matches!(g, Gone::Mapping(_))), "mappings first");
        allocations.sort_by_key(|g| match g {
            Gone::Allocation { key, .. } => key.addr,
            _ => 0,
        });
        let expected = [
            Gone::Allocation { key: key(1, ns::VMM_HANDLE, 0xb), generation: 5 },
            Gone::Allocation { key: key(1, ns::DEVICE_PTR, 0xc), generation: 5 },
            Gone::Allocation { key: key(2, ns::VMM_HANDLE, 0xd), generation: 20 },
            Gone::Allocation { key: key(2, ns::VMM_HANDLE, 0xf), generation: 0 },
        ];
        assert_eq!(allocations, expected);
    }
}
