//! The agent's state and what it does with each record: one owner for the
//! ledger, the sink and the kernel map handles (the event loop in
//! `cmd::run` drives it; the control socket asks it through a channel).
use std::io;

use gpumem_common::EventRecord;

use crate::{
    bpf::kernel::{KernelMaps, Stats},
    control::{StatusEntry, StatusReport},
    enrich::cgroup::CgroupResolver,
    ledger::Ledger,
    output::{monotonic_ns, DroppedLine, EventLine, Line, UsageLine},
    sink::Sink,
};

pub struct Agent {
    pub ledger: Ledger,
    cgroups: CgroupResolver,
    sink: Box<dyn Sink>,
    kernel: KernelMaps,
    libraries: Vec<String>,
    records: u64,
    malformed: u64,
    reported: Stats,
    reported_malformed: u64,
}

impl Agent {
    pub fn new(sink: Box<dyn Sink>, kernel: KernelMaps, libraries: Vec<String>) -> Self {
        Self {
            ledger: Ledger::default(),
            cgroups: CgroupResolver::new(),
            sink,
            kernel,
            libraries,
            records: 0,
            malformed: 0,
            reported: Stats::default(),
            reported_malformed: 0,
        }
    }

    /// Handles one ring-buffer item.
    pub fn on_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(rec) = EventRecord::from_bytes(bytes) else {
            self.malformed += 1;
            return Ok(());
        };
        self.records += 1;
        self.ledger.apply(&rec);
        let path = self.cgroups.path(rec.cgroup_id);
        self.sink.write(&Line::Event(EventLine::new(&rec, path)))
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }

    /// Writes a `dropped` line when any kernel counter moved.
    pub fn check_stats(&mut self) -> io::Result<()> {
        let now = self.kernel.stats();
        if now == self.reported && self.malformed == self.reported_malformed {
            return Ok(());
        }
        let line = DroppedLine {
            ts_ns: monotonic_ns(),
            event: "dropped",
            records: now.ringbuf_drops - self.reported.ringbuf_drops,
            total: now.ringbuf_drops,
            map_full: now.map_full,
            unmatched_returns: now.unmatched_returns,
            cgroup_slots_full: now.cgroup_slots_full,
            out_ptr_unreadable: now.out_ptr_unreadable,
            malformed: self.malformed,
        };
        self.reported = now;
        self.reported_malformed = self.malformed;
        self.sink.write(&Line::Dropped(line))?;
        self.sink.flush()
    }

    /// Writes a `usage` line for every process and cgroup holding memory.
    pub fn write_usage(&mut self) -> io::Result<()> {
        let ts_ns = monotonic_ns();
        let report = self.status();
        for (scope, entries) in [("process", &report.processes), ("cgroup", &report.cgroups)] {
            for e in entries.iter().filter(|e| e.bytes != 0 || e.kernel_bytes != 0) {
                let line = UsageLine {
                    ts_ns,
                    event: "usage",
                    scope,
                    pid: e.pid,
                    comm: e.comm.clone(),
                    cgroup_id: e.cgroup_id,
                    cgroup: e.cgroup.clone(),
                    bytes: e.bytes,
                    kernel_bytes: e.kernel_bytes,
                    split: e.split.clone(),
                };
                self.sink.write(&Line::Usage(line))?;
            }
        }
        self.sink.flush()
    }

    /// The usage table: the ledger's view beside the kernel's, for every
    /// process and cgroup either of them knows.
    pub fn status(&mut self) -> StatusReport {
        let kprocs = self.kernel.processes();
        let kcgroups = self.kernel.cgroups();
        let mut processes = Vec::new();
        for (pid, p) in self.ledger.processes() {
            processes.push(StatusEntry {
                pid: Some(pid),
                comm: Some(p.comm.clone()),
                cgroup_id: p.cgroup_id,
                cgroup: None,
                bytes: p.usage.bytes,
                kernel_bytes: kprocs.get(&pid).copied().unwrap_or(0),
                split: UsageLine::split(&p.usage),
            });
        }
        for (pid, bytes) in &kprocs {
            if self.ledger.process(*pid).is_none() {
                processes.push(StatusEntry {
                    pid: Some(*pid),
                    comm: None,
                    cgroup_id: 0,
                    cgroup: None,
                    bytes: 0,
                    kernel_bytes: *bytes,
                    split: Vec::new(),
                });
            }
        }
        let mut cgroups = Vec::new();
        for (id, u) in self.ledger.cgroups() {
            cgroups.push(StatusEntry {
                pid: None,
                comm: None,
                cgroup_id: id,
                cgroup: None,
                bytes: u.bytes,
                kernel_bytes: kcgroups.get(&id).copied().unwrap_or(0),
                split: UsageLine::split(u),
            });
        }
        for (id, bytes) in &kcgroups {
            if *bytes != 0 && self.ledger.cgroup(*id).is_none() {
                cgroups.push(StatusEntry {
                    pid: None,
                    comm: None,
                    cgroup_id: *id,
                    cgroup: None,
                    bytes: 0,
                    kernel_bytes: *bytes,
                    split: Vec::new(),
                });
            }
        }
        for e in processes.iter_mut().chain(cgroups.iter_mut()) {
            e.cgroup = self.cgroups.path(e.cgroup_id);
        }
        StatusReport {
            libraries: self.libraries.clone(),
            processes,
            cgroups,
            records: self.records,
            dropped: self.kernel.stats().ringbuf_drops,
        }
    }
}
