//! Which build's programs run (`gpumem_common::handover`): this build's
//! claimed before any of its programs is attached, and, taking over from
//! another build (`takeover`), the old build's stood down and its links
//! removed once this one's are all attached.
use std::time::{Duration, Instant};

use aya::{
    maps::{Array, HashMap, MapData},
    programs::{RawTracePoint, RawTracePointRunOptions, TestRun},
};
use gpumem_common::{
    handover::{self, Handover},
    map_name,
};

use super::{
    error::BpfError,
    in_flight::{InFlight, StandingDown},
    persist, probes,
    takeover::Takeover,
    Tracer,
};
use crate::stop_at::stop_at;

/// What a completed takeover did.
#[derive(Debug)]
pub struct TookOver {
    pub from: Takeover,
    /// The old build's pins removed (its links detached by the kernel).
    pub removed: persist::Removed,
    /// From the old build's pins' removal to its programs gone.
    pub detach: Duration,
    /// The calls in flight from before this build's return probes that
    /// the removal waited for (`in_flight`), and how long.
    pub calls: usize,
    pub waited: Duration,
}

/// What [`Tracer::complete_takeover`] did.
#[derive(Debug)]
pub enum Completion {
    Done(TookOver),
    /// This build runs; the old build's pins stay until `left` calls in
    /// flight (on `threads`) have returned ([`Tracer::finish_takeover`]).
    Waiting {
        left: usize,
        threads: String,
    },
}

/// How long a takeover waits, before the agent goes on, for the calls in
/// flight that entered before this build's return probes were attached.
pub const AT_ONCE: Duration = Duration::from_millis(250);
/// How often those calls are read again meanwhile.
const SETTLE_EVERY: Duration = Duration::from_millis(1);
/// How long the old build's pins stay at most for calls still in flight
/// (a driver call that takes longer is stuck, or hung).
pub const WAIT_AT_MOST: Duration = Duration::from_secs(60);

impl Tracer {
    /// Names this build's programs as the ones to run, before any is
    /// attached: beside the old build's while taking over; alone otherwise
    /// (a fresh map, which runs nothing until named, gets this build's
    /// layout too).
    pub(super) fn claim(&mut self) -> Result<(), BpfError> {
        if let Some(t) = &self.takeover {
            let (tag, build) = (t.tag, t.build.clone());
            if !t.from.join("maps").join(map_name::LIVE_TABLE).exists() {
                // A build before the live table: its allocations are in
                // `LIVE`, where this build's programs look only when told.
                self.mark_live_spilled()?;
            }
            self.set_word(handover::joining(tag, self.build))?;
            // Marks an interrupted takeover's builds left would be read as
            // this one's.
            self.clear_marks()?;
            tracing::info!("taking over from build {build}: attaching this build's programs beside its own");
            stop_at("joining", "");
            return Ok(());
        }
        let (build, fresh_layout) = (self.build, self.fresh_layout);
        let mut array = self.handover_map()?;
        let now = array.get(&0, 0).map_err(|e| BpfError::Handover(format!("reading HANDOVER: {e}")))?;
        if now.word == handover::steady(build) {
            return Ok(()); // an earlier agent of this build's, adopted
        }
        if handover::owner(now.word) == build {
            // This build's programs run, part way through a takeover that
            // was interrupted (the other build's pins are gone): alone now.
            self.set_word(handover::steady(build))?;
            self.clear_marks()?;
            tracing::warn!(
                "finished an interrupted takeover: the handover word was {}; this build's programs run alone",
                persist::word::describe(now.word)
            );
            return Ok(());
        }
        if now == Handover::default() {
            let ours = Handover { word: handover::steady(build), layout: fresh_layout };
            return array.set(0, ours, 0).map_err(|e| BpfError::Handover(format!("writing HANDOVER: {e}")));
        }
        Err(BpfError::Handover(format!(
            "the pinned HANDOVER map names another build's programs (word {:#x}, this build's tag {:#x}); run \
             `gpumem detach` and start again",
            now.word, build
        )))
    }

    /// Completes a takeover once every library is attached by this build:
    /// its programs run in the old build's place, the old build's pins go
    /// (waiting for the kernel to detach their programs), and this build
    /// runs alone. Where this build's return probes are single links, the
    /// old build's pins stay until the calls that entered before them
    /// have returned (`in_flight`): waited for here up to [`AT_ONCE`], and
    /// after that by [`Self::finish_takeover`]. None where nothing was
    /// taken over.
    pub fn complete_takeover(&mut self) -> Result<Option<Completion>, BpfError> {
        let Some(from) = self.takeover.clone() else { return Ok(None) };
        stop_at("attached", "");
        self.set_word(handover::leaving(from.tag, self.build))?;
        tracing::info!("this build's programs run in build {}'s place; removing its pins", from.build);
        stop_at("leaving", "");
        // This build runs now: from here on nothing hands back (the old
        // build's links are going), whatever fails.
        self.takeover = None;
        let started = Instant::now();
        if let Some(maps) = self.call_maps.take() {
            let mut calls = InFlight::find(&maps);
            let found = calls.len();
            while calls.settle(&maps) > 0 && started.elapsed() < AT_ONCE {
                std::thread::sleep(SETTLE_EVERY);
            }
            if !calls.is_empty() {
                let left = calls.len();
                let threads = calls.describe();
                self.standing_down = Some(StandingDown { from, maps, calls, found, since: started });
                return Ok(Some(Completion::Waiting { left, threads }));
            }
            return self.remove_old(from, found, started.elapsed()).map(|t| Some(Completion::Done(t)));
        }
        self.remove_old(from, 0, Duration::ZERO).map(|t| Some(Completion::Done(t)))
    }

    /// Whether a takeover waits for calls in flight before the old build's
    /// pins go ([`Self::complete_takeover`]).
    pub fn standing_down(&self) -> bool {
        self.standing_down.is_some()
    }

    /// Reads again the calls a takeover waits for, and removes the old
    /// build's pins once they have returned, or once [`WAIT_AT_MOST`] has
    /// passed, or `now` (the agent stops: the next agent would remove them
    /// at its start), said with the threads still inside a call: if they
    /// return later, neither build's return program runs. What it did,
    /// once.
    pub fn finish_takeover(&mut self, now: bool) -> Result<Option<TookOver>, BpfError> {
        let Some(s) = &mut self.standing_down else { return Ok(None) };
        let left = s.calls.settle(&s.maps);
        let waited = s.since.elapsed();
        if left > 0 && waited < WAIT_AT_MOST && !now {
            return Ok(None);
        }
        let Some(s) = self.standing_down.take() else { return Ok(None) };
        if left > 0 {
            tracing::warn!(
                "{left} call(s) that entered before this build's return probes were attached are still in \
                 flight after {} ms ({}): removing build {}'s pins anyway; where one returns later, neither \
                 build's return program runs (the kernel runs a single-link return probe only for calls \
                 that entered after it was attached), and an allocation it made goes uncounted",
                waited.as_millis(),
                s.calls.describe(),
                s.from.build
            );
        }
        self.remove_old(s.from, s.found, waited).map(Some)
    }

    /// The old build's pins removed (its links detached by the kernel) and
    /// this build alone named; `calls` were waited for `waited` first.
    fn remove_old(&mut self, from: Takeover, calls: usize, waited: Duration) -> Result<TookOver, BpfError> {
        let started = Instant::now();
        let removed = persist::remove(&from.from).unwrap_or_else(|e| {
            tracing::warn!(
                "removing build {}'s pins at {}: {e}; its programs stand by (this build runs), `gpumem \
                 detach` removes them with everything",
                from.build,
                from.from.display()
            );
            persist::Removed::default()
        });
        let detach = started.elapsed();
        stop_at("removed", "");
        self.set_word(handover::steady(self.build))?;
        self.clear_marks()?;
        Ok(TookOver { from, removed, detach, calls, waited })
    }

    /// Undoes a takeover that did not complete (the agent failed to start):
    /// the old build's programs run alone again and this build's pins go.
    pub(super) fn abandon_takeover(&mut self) {
        let Some(from) = self.takeover.take() else { return };
        if let Err(e) = self.set_word(handover::steady(from.tag)) {
            tracing::warn!("handing back to build {} failed: {e}", from.build);
        }
        if let Some(pins) = &self.pins {
            if let Err(e) = persist::unpin(pins.dir()) {
                tracing::warn!("removing this build's pins at {}: {e}", pins.dir().display());
            }
        }
        tracing::info!("the takeover did not complete: build {} runs on, as it was", from.build);
    }

    /// Stores the handover word in one atomic step (the never-attached
    /// program `handover_set`, run by BPF_PROG_TEST_RUN).
    fn set_word(&self, word: u64) -> Result<(), BpfError> {
        let name = probes::HANDOVER_SET;
        let prog: &RawTracePoint = self
            .ebpf
            .program(name)
            .ok_or(BpfError::MissingProgram(name))?
            .try_into()
            .map_err(|e| BpfError::Program { name, source: Box::new(e) })?;
        let mut opts = RawTracePointRunOptions::new();
        opts.args[0] = word;
        match prog.test_run(opts) {
            Ok(r) if r.return_value == 0 => Ok(()),
            Ok(r) => Err(BpfError::Handover(format!("{name} returned {}", r.return_value))),
            Err(e) => Err(BpfError::Handover(format!("running {name}: {e}"))),
        }
    }

    fn handover_map(&mut self) -> Result<Array<&mut MapData, Handover>, BpfError> {
        let name = map_name::HANDOVER;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::MissingMap(name))?;
        Array::try_from(map).map_err(|e| BpfError::Map { name, source: Box::new(e) })
    }

    /// Marks `LIVE` as holding an older build's allocations
    /// (`gpumem_common::spilled::OLD`), which the table does not.
    fn mark_live_spilled(&mut self) -> Result<(), BpfError> {
        let name = map_name::LIVE_SPILLED;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::MissingMap(name))?;
        let mut flag: Array<&mut MapData, u64> =
            Array::try_from(map).map_err(|e| BpfError::Map { name, source: Box::new(e) })?;
        flag.set(gpumem_common::spilled::OLD, 1, 0).map_err(|e| BpfError::Map { name, source: Box::new(e) })
    }

    /// Forgets the marks the programs left while both builds ran.
    fn clear_marks(&mut self) -> Result<(), BpfError> {
        let name = map_name::HANDOVER_MARKS;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::MissingMap(name))?;
        let mut marks: HashMap<&mut MapData, u64, u64> =
            HashMap::try_from(map).map_err(|e| BpfError::Map { name, source: Box::new(e) })?;
        let threads: Vec<u64> = marks.keys().flatten().collect();
        for t in threads {
            let _ = marks.remove(&t);
        }
        Ok(())
    }
}
