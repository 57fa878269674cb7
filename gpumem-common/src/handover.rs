//! Handing the kernel side from one build of gpumem to another with no
//! call unseen and none seen twice (`gpumem run --persist` finding
//! another build's pins: a takeover).
//!
//! Every program of every build reads one word, `HANDOVER[0].word`, and
//! runs only where it names the program's build (`BUILD`, a 31-bit tag
//! the agent sets at load). The agent that takes over moves the word, with
//! one atomic store each (the never-attached program `handover_set`):
//!
//! 1. steady, old owns: `old`;
//! 2. `joining(old, new)`, stored before any of the new build's programs
//!    is attached: the old build's programs run, the new build's stand by;
//! 3. `leaving(old, new)`: the new build's programs run, the old build's
//!    stand by, once every library is attached by the new build;
//! 4. steady, new owns: `new`, once the old build's links are gone.
//!
//! The store between 2 and 3 can fall between the two programs one hit
//! runs. A uprobe's consumers run newest first, one after the other, in
//! the hitting task (`handler_chain` in kernel/events/uprobes.c adds each
//! consumer at the list's head, 6.1 to 7.x); so the new build's program
//! runs first and leaves a mark for its thread and site
//! (`HANDOVER_MARKS`): at 2 that it stood by, at 3 that it ran. The old
//! build's program at 3 runs unless the mark says the new one ran this
//! hit: so a hit whose new program saw 2 and whose old program saw 3 runs
//! once, and so does a return whose new program the kernel never calls
//! (from 6.13 a perf-link uretprobe registered after the call's entry is
//! skipped at its return; the agent keeps the old build's links until
//! such calls have returned, `bpf/in_flight.rs` in gpumem-user). At 2 the
//! old build's program clears the mark,
//! and a thread's mark goes when it exits (a later thread given its id
//! must not find it). Where the kernel skipped that exit's run (7.x, see
//! `release_gone` in the eBPF crate) the mark stays until an agent next
//! stores a word, which clears every mark: a later thread given its id
//! meanwhile overwrites it at its first hit, before any old program reads it.
//! Raw tracepoints run their programs oldest first; there both builds run
//! during 2 (the exit and exec programs find nothing left the second
//! time), so no store between them loses a run.

/// Bumped whenever a shared map's layout or meaning changes: a build
/// takes over only from one of the same layout. 4: the live table's
/// slots chosen by region, pages side by side (`live_slot`).
pub const LAYOUT: u64 = 4;
/// The layout before 4: the same maps, the live table's slots by a hash of
/// the whole address (`live_slot_scattered`). A build of layout 4 takes
/// its state over and keeps placing slots so, as long as the table lives.
pub const SCATTERED_SLOTS_LAYOUT: u64 = 3;

const PHASE_SHIFT: u32 = 62;
const OLD_SHIFT: u32 = 31;
const TAG_MASK: u64 = (1 << 31) - 1;
/// The phases of a word ([`parts`]); 0 is steady.
pub const JOINING: u64 = 1;
pub const LEAVING: u64 = 2;

/// `HANDOVER[0]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handover {
    /// Which build's programs run (see the module's text).
    pub word: u64,
    /// The [`LAYOUT`] of the build that created the maps.
    pub layout: u64,
}
const _: () = assert!(core::mem::size_of::<Handover>() == 16);

// SAFETY: repr(C), two u64s, no padding (size asserted above).
#[cfg(feature = "user")]
unsafe impl aya::Pod for Handover {}

/// A build's tag from its identity hash: 31 bits, never 0 (0 is no build:
/// a fresh map runs nothing until the agent names its build).
pub const fn tag(identity: u64) -> u32 {
    let t = (identity ^ (identity >> 31) ^ (identity >> 62)) & TAG_MASK;
    if t == 0 {
        1
    } else {
        t as u32
    }
}

/// The word while `owner` alone runs.
pub const fn steady(owner: u32) -> u64 {
    owner as u64 & TAG_MASK
}

/// The word while `new` attaches beside `old` (old runs).
pub const fn joining(old: u32, new: u32) -> u64 {
    JOINING << PHASE_SHIFT | (old as u64 & TAG_MASK) << OLD_SHIFT | (new as u64 & TAG_MASK)
}

/// The word while `old`'s links go (new runs).
pub const fn leaving(old: u32, new: u32) -> u64 {
    LEAVING << PHASE_SHIFT | (old as u64 & TAG_MASK) << OLD_SHIFT | (new as u64 & TAG_MASK)
}

/// The build that runs under `word`.
pub const fn owner(word: u64) -> u32 {
    match word >> PHASE_SHIFT {
        JOINING => ((word >> OLD_SHIFT) & TAG_MASK) as u32,
        _ => (word & TAG_MASK) as u32,
    }
}

/// The phase of `word` (0 steady, [`JOINING`] or [`LEAVING`]) and the
/// builds it names: (phase, old, new); a steady word names only `new`, its
/// owner.
pub const fn parts(word: u64) -> (u64, u32, u32) {
    (word >> PHASE_SHIFT, ((word >> OLD_SHIFT) & TAG_MASK) as u32, (word & TAG_MASK) as u32)
}

/// What a uprobe program of build `me` does under `word`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uprobe {
    /// Runs.
    Run,
    /// Runs, and clears its thread's mark (the old build, joining).
    RunClearing,
    /// Stands by, marking its thread and site (the new build, joining).
    StandByMarking,
    /// Runs, marking its thread and site (the new build, leaving).
    RunMarking,
    /// Runs unless its thread's mark says the new build ran this site,
    /// and clears the mark (the old build, leaving).
    RunUnlessRan,
    /// Stands by.
    StandBy,
}

/// See [`Uprobe`].
pub const fn uprobe(word: u64, me: u32) -> Uprobe {
    let me = me as u64 & TAG_MASK;
    let (phase, old, new) = (word >> PHASE_SHIFT, (word >> OLD_SHIFT) & TAG_MASK, word & TAG_MASK);
    match phase {
        JOINING if me == old => Uprobe::RunClearing,
        JOINING if me == new => Uprobe::StandByMarking,
        LEAVING if me == new => Uprobe::RunMarking,
        LEAVING if me == old => Uprobe::RunUnlessRan,
        0 if me == new => Uprobe::Run,
        _ => Uprobe::StandBy,
    }
}

/// Whether a raw tracepoint program of build `me` runs under `word`: the
/// owner's, and during [`joining`] both.
pub const fn tracepoint(word: u64, me: u32) -> bool {
    let me = me as u64 & TAG_MASK;
    let (phase, old, new) = (word >> PHASE_SHIFT, (word >> OLD_SHIFT) & TAG_MASK, word & TAG_MASK);
    match phase {
        JOINING => me == old || me == new,
        LEAVING | 0 => me == new,
        _ => false,
    }
}

/// A uprobe site's mark: the attach cookie (API, kind, where `deny`
/// returns), whether it is the return, and whether the new build `ran`.
pub const fn mark(cookie: u64, is_return: bool, ran: bool) -> u64 {
    (cookie.rotate_left(2) ^ ((is_return as u64) << 1)) & !1 | ran as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: u32 = 0x1234_5678;
    const NEW: u32 = 0x0765_4321;

    /// One hit at site (7, return): the new build's program runs first
    /// (newest first) if the kernel calls it, then the old one's, with the
    /// word stored between them or not; the mark is the thread's. How many
    /// of them ran.
    fn hit(words: (u64, u64), new_called: bool, mark: &mut Option<u64>) -> u32 {
        let mut ran = 0;
        for (word, me) in [(words.0, NEW), (words.1, OLD)] {
            if me == NEW && !new_called {
                continue;
            }
            let run = match uprobe(word, me) {
                Uprobe::Run => true,
                Uprobe::RunClearing => {
                    *mark = None;
                    true
                }
                Uprobe::StandByMarking => {
                    *mark = Some(super::mark(7, true, false));
                    false
                }
                Uprobe::RunMarking => {
                    *mark = Some(super::mark(7, true, true));
                    true
                }
                Uprobe::RunUnlessRan => mark.take() != Some(super::mark(7, true, true)),
                Uprobe::StandBy => false,
            };
            ran += u32::from(run);
        }
        ran
    }

    #[test]
    fn every_uprobe_hit_runs_once_whichever_store_falls_inside_it() {
        let words = [steady(OLD), joining(OLD, NEW), leaving(OLD, NEW), steady(NEW)];
        // The new build's programs are attached from `joining` on, and the
        // old one's are gone at `steady(NEW)`: hits straddling each store,
        // with the new program called or (a return it missed) not.
        for i in 1..3 {
            for (a, b) in [(i, i), (i, i + 1)] {
                for new_called in [true, false] {
                    let mut mark = None;
                    let ran = match b < 3 {
                        true => hit((words[a], words[b]), new_called, &mut mark),
                        false => u32::from(new_called && uprobe(words[a], NEW) != Uprobe::StandBy),
                    };
                    if b < 3 || new_called {
                        assert_eq!(ran, 1, "words {a} then {b}, new called: {new_called}");
                    }
                }
            }
        }
        assert_eq!(uprobe(steady(OLD), OLD), Uprobe::Run);
        assert_eq!(uprobe(steady(OLD), NEW), Uprobe::StandBy, "an unknown build stands by");
        assert_eq!(uprobe(0, OLD), Uprobe::StandBy, "a fresh map runs nothing");
    }

    #[test]
    fn a_stale_mark_of_another_site_does_not_stop_the_old_build() {
        let mut mark = Some(super::mark(7, false, true));
        let leaving = leaving(OLD, NEW);
        assert_eq!(hit((leaving, leaving), false, &mut mark), 1);
        assert_ne!(super::mark(7, false, true), super::mark(7, true, true));
        assert_ne!(super::mark(7, true, false), super::mark(7, true, true));
    }

    #[test]
    fn tracepoints_never_lose_a_run() {
        let words = [steady(OLD), joining(OLD, NEW), leaving(OLD, NEW), steady(NEW)];
        // Oldest first: the old build's program sees the earlier word.
        for a in 0..3 {
            for b in a..4 {
                let ran =
                    u32::from(tracepoint(words[a], OLD)) + u32::from(b >= 1 && tracepoint(words[b], NEW));
                assert!(ran >= 1, "words {a} then {b}");
            }
        }
        assert!(!tracepoint(leaving(OLD, NEW), OLD) && tracepoint(leaving(OLD, NEW), NEW));
    }

    #[test]
    fn tags_are_31_bits_and_never_zero() {
        assert_eq!(tag(0), 1);
        assert!(tag(u64::MAX) <= TAG_MASK as u32);
        assert_eq!(owner(joining(OLD, NEW)), OLD);
        assert_eq!(owner(leaving(OLD, NEW)), NEW);
        assert_eq!(owner(steady(NEW)), NEW);
    }
}
