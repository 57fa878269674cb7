//! The agent's state, one owner per stage of the pipeline each record
//! goes through, in this order:
//!
//! ring-buffer bytes -> `decode` (a typed event; malformed ones counted by
//! `health`) -> `ledger` (what each process and cgroup holds) -> `limits`
//! (bases of limits set at run time follow carried memory) -> `enrich`
//! (cgroup path, container, process) -> `output` (the record line) ->
//! `sink`.
//!
//! The event loop (`cmd::run`) drives it: records, control requests
//! (`requests.rs`), the health step, usage lines, scrapes. Status tables
//! are built in `status.rs`, metrics snapshots in `scrape.rs`, `top`'s
//! answer in `top.rs` (with the latest decisions and failures kept in
//! `recent.rs`).
mod denied;
mod held;
mod recent;
mod requests;
mod scrape;
mod status;
mod top;

use std::{io, sync::Arc};

use gpumem_common::{declare::declaration::Declaration, CUDA_ERROR_OUT_OF_MEMORY};

use self::{denied::Denied, recent::Recent};
use crate::{
    bpf::{
        attach::AttachReport,
        hashed::{Dead, HashedMaps},
        kernel::KernelMaps,
        Gone,
    },
    decode::{decode, Body, Change, Event, Origin, Taken},
    enrich::{devices::Devices, Enricher},
    health::{reclaim::Reclaim, Health},
    holders::{About, HolderLookup, Sources},
    ledger::Ledger,
    limits::{policy::config::Policy, Held, Limits},
    metrics::counts::EventCounts,
    output::{declared::DeclaredLine, EventLine, Holders, LimitLine, Line},
    sink::records::Records,
};

pub struct Agent {
    ledger: Ledger,
    enricher: Enricher,
    devices: Devices,
    limits: Limits,
    health: Health,
    kernel: KernelMaps,
    sink: Records,
    /// Libraries attached, for `status`.
    libraries: Vec<String>,
    /// Entry points probed, over every library (metrics).
    probes: u64,
    /// Limit decisions and failed allocations (metrics).
    counts: EventCounts,
    /// The `holders` of out-of-memory and limit records.
    holders: HolderLookup,
    /// Threads whose call `deny` refused, until its return is read.
    denied: Denied,
    /// The latest limit decisions and failed allocations (`top`).
    recent: Recent,
}

impl Agent {
    /// `(kernel, hashed)`: `KernelMaps::take`'s; `ledger`: empty, or what
    /// an adopted earlier agent's maps held.
    pub fn new(
        sink: Records,
        (kernel, hashed): (KernelMaps, HashedMaps),
        limits: Limits,
        ledger: Ledger,
        attached: &[AttachReport],
    ) -> Self {
        let mut agent = Self {
            ledger,
            enricher: Enricher::default(),
            devices: Devices::open(),
            limits,
            health: Health::new(Reclaim::new(hashed)),
            kernel,
            sink,
            libraries: Vec::new(),
            probes: 0,
            counts: EventCounts::default(),
            holders: HolderLookup::default(),
            denied: Denied::default(),
            recent: Recent::default(),
        };
        for r in attached {
            agent.add_library(r);
        }
        agent.say_running_declarations();
        if let Err(e) = agent.pods_step() {
            tracing::warn!("writing records: {e}");
        }
        agent
    }

    /// The processes found declaring limits when the agent started: a
    /// `declared` record each, as their exec would have given.
    fn say_running_declarations(&mut self) {
        let running = self.limits.take_running();
        self.say_declarations(running);
    }

    /// What process `origin.pid` declared: kept to name its limits, and
    /// made its container's rules where it runs in one; its record.
    fn declaration(&mut self, origin: &Origin, decl: &Declaration) -> DeclaredLine {
        self.limits.saw_declaration(origin.pid, decl);
        let (cgroup, container) = self.enricher.cgroup(origin.cgroup_id);
        let place = cgroup.as_deref().zip(container.as_ref()).map(|(p, c)| (p, c.id.as_str()));
        let (kernel, ledger) = (&self.kernel, &self.ledger);
        let read = || held_now(kernel, ledger);
        let bound = self.limits.declared_in_container(origin.pid, decl, place, &read);
        let mut line = DeclaredLine::new(origin, decl, cgroup, container.map(Arc::unwrap_or_clone));
        line.container_limit = bound;
        line
    }

    /// A `declared` record for each of `found` (read by the agent).
    fn say_declarations(&mut self, found: Vec<crate::limits::declared::Running>) {
        for r in found {
            let origin = Origin {
                ts_ns: crate::output::lines::monotonic_ns(),
                pid: r.pid,
                tid: r.pid,
                cgroup_id: r.cgroup_id,
                comm: r.comm.as_str().into(),
                api: gpumem_common::id::NONE,
            };
            let line = self.declaration(&origin, &r.decl);
            tracing::info!(
                "pid {} ({}) declares, as it runs: {}",
                r.pid,
                r.comm,
                crate::sink::text::declared(&line)
            );
            if let Err(e) = self.sink.write(&Line::Declared(Box::new(line))) {
                tracing::warn!("writing a declared record: {e}");
            }
        }
    }

    /// The agent went idle (`on`) or left it (`woken`: a record's wake-up
    /// ended it), for `status`.
    pub fn set_idle(&mut self, on: bool, woken: bool) {
        self.health.set_idle(on, woken);
    }

    /// A library attached.
    pub fn add_library(&mut self, r: &AttachReport) {
        self.libraries.push(r.library.path.display().to_string());
        self.probes += r.attached.len() as u64;
    }

    /// One ring-buffer item through the pipeline.
    pub fn on_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        match decode(bytes) {
            Ok(event) => self.on_event(&event),
            Err(e) => {
                self.health.malformed(&e);
                Ok(())
            }
        }
    }

    fn on_event(&mut self, e: &Event) -> io::Result<()> {
        self.health.applied();
        self.ledger.apply(e);
        self.limits.follow(e);
        if matches!(e.body, Body::Exit(_) | Body::Exec(_)) {
            self.enricher.forget(e.origin.pid);
            self.health.reclaim.released();
        }
        let (cgroup, container) = self.enricher.cgroup(e.origin.cgroup_id);
        if let (Body::Exec(_), Some(uid)) = (&e.body, container.as_ref().and_then(|c| c.pod_uid.as_deref())) {
            let (kernel, ledger) = (&self.kernel, &self.ledger);
            self.limits.saw_pod(uid, &|| held_now(kernel, ledger));
        }
        let line = match &e.body {
            Body::Limit(d) | Body::LimitSoft(d) => {
                let soft = matches!(e.body, Body::LimitSoft(_));
                let mut line =
                    LimitLine::new(&e.origin, d, soft, cgroup, self.limits.rule(d.slot, e.origin.pid));
                line.source = self.limits.source(d.slot);
                self.counts.decision(&line.limit, soft, &line.action);
                if !soft && d.taken == Taken::Deny {
                    self.denied.saw(e.origin.tid);
                }
                line.holders = self.holders(About::Limit(d.slot));
                Line::Limit(line)
            }
            Body::Declared(decl) => Line::Declared(Box::new(self.declaration(&e.origin, decl))),
            Body::Held(h) => return self.on_held(&e.origin, h.pod_cgroup_id),
            _ => match EventLine::new(e, cgroup, container) {
                Some(mut line) => {
                    match &e.body {
                        Body::AllocFailed(c) => line.holders = self.refusal(e.origin.tid, c),
                        Body::Alloc(_) => {
                            self.denied.returned(e.origin.tid);
                        }
                        _ => {}
                    }
                    Line::Event(line)
                }
                None => return Ok(()),
            },
        };
        self.recent.saw(&line);
        self.sink.write(&line)
    }

    /// A refused allocation: counted, and given holders where the driver
    /// ran out of memory; a call gpumem's own `deny` refused is neither
    /// (its `limit` record says why, with the limit's holders).
    fn refusal(&mut self, tid: u32, c: &Change) -> Option<Box<Holders>> {
        if self.denied.returned(tid) && c.result == Some(CUDA_ERROR_OUT_OF_MEMORY) {
            return None;
        }
        self.counts.failure(c.device, c.result.unwrap_or(0));
        About::of_refusal(c).and_then(|a| self.holders(a))
    }

    /// Who holds the memory a device or a limit covers, now.
    fn holders(&mut self, about: About) -> Option<Box<Holders>> {
        let sources = Sources {
            ledger: &self.ledger,
            limits: &self.limits,
            enricher: &mut self.enricher,
            devices: &self.devices,
        };
        self.holders.find(about, sources)
    }

    /// What the ring held past its last drain (see `Ring::unread`), for
    /// `status`.
    pub fn saw_ring_unread(&mut self, bytes: u64) {
        self.health.ring_unread = bytes;
    }

    /// Makes everything written so far visible to readers.
    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }

    /// The health step: finishes what exits the kernel skipped left
    /// (through `release`, which runs the kernel's release program), has
    /// the kernel forget what the sweep found exited images left in its
    /// hash maps (through `forget`, which runs `forget_dead`), then
    /// writes a `dropped` line if any counter moved (while the output fails,
    /// at its first flush that succeeds).
    pub fn check_health(
        &mut self,
        mut release: impl FnMut(Gone) -> Option<u32>,
        forget: impl FnMut(Dead) -> Option<u32>,
    ) -> io::Result<()> {
        self.health.recover_missed_exits(&self.kernel, &mut release);
        self.health.reclaim.step(&mut self.kernel, forget);
        let found = self.limits.recover_declared();
        self.say_declarations(found);
        self.limits.forget_gone_containers();
        self.pods_step()?;
        if self.sink.failing() {
            // Said once the output takes lines again, with every count.
            return Ok(());
        }
        if let Some(line) = self.health.report(self.kernel.stats(), self.sink.lost()) {
            self.sink.write(&Line::Dropped(line))?;
            self.sink.flush()?;
        }
        Ok(())
    }

    /// SIGHUP: applies a reread policy.
    pub fn reload(&mut self, policy: &Policy) {
        let (kernel, ledger) = (&self.kernel, &self.ledger);
        let read = || held_now(kernel, ledger);
        self.limits.reload(policy, &read, "SIGHUP");
    }
}

/// What is held now, as the kernel holds it (a rule set at run time
/// carries it, see `limits/setting.rs`).
fn held_now<'a>(kernel: &KernelMaps, ledger: &'a Ledger) -> Held<'a> {
    Held::of_kernel(&kernel.held(), ledger, crate::output::lines::monotonic_ns())
}
