//! The agent's health: records applied and malformed, the kernel's
//! counters of what it could not do, and the recovery of exits the kernel
//! skipped. Both are explicit steps of the event loop (`gpumem run`): a
//! `dropped` line whenever a counter moved, and the recovery of exits the
//! kernel skipped (`gone`: who has exited).
pub mod gone;
pub mod reclaim;

use std::{collections::BTreeMap, path::Path};

use self::gone::Tasks;

use crate::{
    bpf::{
        kernel::{KernelMaps, Stats},
        Gone,
    },
    decode::DecodeError,
    output::{monotonic_ns, DroppedEvent, DroppedLine},
};

/// What the agent counts of its own.
#[derive(Debug, Default)]
pub struct Health {
    /// Records applied to the ledger.
    records: u64,
    /// Ring-buffer items that were not records.
    malformed: u64,
    /// Processes found gone while the kernel still counted memory for them
    /// (their exit's program run was skipped), released by the agent.
    missed_exits: u64,
    /// Threads found gone while the kernel still held calls of theirs in
    /// flight (their exit's run was skipped), forgotten by the agent.
    missed_thread_exits: u64,
    /// The counters as the last `dropped` line reported them.
    reported: Reported,
    /// The live table's slots of released images, emptied.
    pub reclaim: reclaim::Reclaim,
    /// Whether the agent is idle (its drain timer stopped, see
    /// cmd/run/idle.rs), and how many times a record woke it from idle.
    idle: bool,
    idle_wakes: u64,
    /// What the ring held past the last drain (`Ring::unread`).
    pub ring_unread: u64,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Reported {
    stats: Stats,
    malformed: u64,
    missed_exits: u64,
    missed_thread_exits: u64,
    unwritten: u64,
}

impl Health {
    /// Counting from nothing, sweeping with `reclaim`.
    pub fn new(reclaim: reclaim::Reclaim) -> Self {
        Self { reclaim, ..Self::default() }
    }

    /// The agent went idle (`on`) or left it; `woken`: a record's wake-up
    /// ended it.
    pub fn set_idle(&mut self, on: bool, woken: bool) {
        self.idle = on;
        self.idle_wakes += u64::from(!on && woken);
    }

    /// Whether the agent is idle, and the times a record woke it from idle.
    pub fn idle(&self) -> (bool, u64) {
        (self.idle, self.idle_wakes)
    }

    /// A record applied.
    pub fn applied(&mut self) {
        self.records += 1;
    }

    /// Bytes from the ring buffer that were not a record; the first is
    /// said, all are counted (`dropped.malformed`).
    pub fn malformed(&mut self, e: &DecodeError) {
        if self.malformed == 0 {
            tracing::warn!(
                "a ring-buffer record could not be read ({e}); such records are counted as malformed"
            );
        }
        self.malformed += 1;
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    /// Ring-buffer items that were not records, so far.
    pub fn malformed_count(&self) -> u64 {
        self.malformed
    }

    /// Finishes in the kernel, through `release` (which runs the kernel's
    /// release program and gives back its result, None if the kernel
    /// refused), what each exit left: every process with a usage entry
    /// that has exited (released if its exit's run was skipped, its `exit`
    /// record coming through the ring buffer as a normal one would; its
    /// entry, which an exit keeps for the group's last threads, deleted),
    /// and every
    /// thread that has exited with calls still in `PENDING` (what they
    /// reserved under limits goes back).
    pub fn recover_missed_exits(
        &mut self,
        kernel: &KernelMaps,
        mut release: impl FnMut(Gone) -> Option<u32>,
    ) {
        let proc_root = Path::new("/proc");
        let entries = kernel.usage_entries();
        let threads = kernel.threads_with_calls();
        // Each process's /proc entry read once, for both questions.
        let tasks: BTreeMap<u32, Tasks> =
            entries.keys().chain(threads.keys()).map(|&tgid| (tgid, gone::tasks(proc_root, tgid))).collect();
        for (tgid, generation) in entries {
            if tasks[&tgid] != Tasks::Gone {
                continue;
            }
            // 1: its exit's run was skipped, and this released it; 0: its
            // exit had, and only its entry was left (deleted now).
            match release(Gone::Process { tgid, generation }) {
                Some(1) => {
                    self.missed_exits += 1;
                    self.reclaim.released();
                }
                Some(_) => self.reclaim.released(),
                None => {}
            }
        }
        for (tgid, tids) in threads {
            for tid in tids.into_iter().filter(|&tid| tasks[&tgid].thread_gone(tid)) {
                let pid_tgid = (u64::from(tgid) << 32) | u64::from(tid);
                if release(Gone::Thread(pid_tgid)).is_some_and(|forgot| forgot > 0) {
                    self.missed_thread_exits += 1;
                }
            }
        }
    }

    /// A `dropped` line when any counter moved since the last one
    /// (`unwritten`: lines the output could not take, see `sink`).
    pub fn report(&mut self, stats: Stats, unwritten: u64) -> Option<DroppedLine> {
        let now = Reported {
            stats,
            malformed: self.malformed,
            missed_exits: self.missed_exits,
            missed_thread_exits: self.missed_thread_exits,
            unwritten,
        };
        if now == self.reported {
            return None;
        }
        let line = DroppedLine {
            ts_ns: monotonic_ns(),
            event: DroppedEvent::Dropped,
            records: stats.ringbuf_drops - self.reported.stats.ringbuf_drops,
            total: stats.ringbuf_drops,
            map_full: stats.map_full,
            unmatched_returns: stats.unmatched_returns,
            cgroup_slots_full: stats.cgroup_slots_full,
            out_ptr_unreadable: stats.out_ptr_unreadable,
            skipped_runs: stats.skipped_runs,
            malformed: self.malformed,
            missed_exits: self.missed_exits,
            missed_thread_exits: self.missed_thread_exits,
            unwritten,
        };
        self.reported = now;
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_line_comes_only_when_a_counter_moved() {
        let mut h = Health::default();
        assert!(h.report(Stats::default(), 0).is_none());
        let stats = Stats { ringbuf_drops: 5, skipped_runs: 2, ..Stats::default() };
        let line = h.report(stats, 0).unwrap();
        assert_eq!((line.records, line.total, line.skipped_runs), (5, 5, 2));
        assert!(h.report(stats, 0).is_none(), "nothing moved since");
        h.malformed(&DecodeError::Short(3));
        let line = h.report(Stats { ringbuf_drops: 7, ..stats }, 0).unwrap();
        assert_eq!((line.records, line.total, line.malformed), (2, 7, 1));
        let line = h.report(Stats { ringbuf_drops: 7, ..stats }, 4).unwrap();
        assert_eq!((line.records, line.unwritten), (0, 4), "lines the output could not take");
    }
}
