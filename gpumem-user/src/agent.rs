//! The agent's state and what it does with each record: one owner for the
//! ledger, the sink and the kernel map handles (the event loop in
//! `cmd::run` drives it; the control socket asks it through a channel).
use std::io;

use std::collections::HashMap;

use gpumem_common::{event_type, ns, EventRecord, FLAG_UNTRACKED};

use crate::{
    bpf::{
        kernel::{KernelMaps, Stats},
        limits::{Installed, LimitError, LimitTable},
    },
    carried::{Carried, Entry},
    control::{StatusEntry, StatusReport},
    enrich::{
        cgroup::CgroupResolver,
        container::{self, Container},
        devices::Devices,
        process::Processes,
    },
    ledger::Ledger,
    output::{monotonic_ns, Caller, DroppedLine, EventLine, LimitLine, Line, UsageLine},
    policy::{Action, Limit, Target},
    sink::Sink,
};

pub struct Agent {
    pub ledger: Ledger,
    cgroups: CgroupResolver,
    procs: Processes,
    limit_names: HashMap<u32, (String, Action)>,
    /// The kernel's limit maps and rules (None until installed).
    pub limits: Option<LimitTable>,
    /// What targets held when their limits were set at run time.
    carried: Carried,
    devices: Devices,
    sink: Box<dyn Sink>,
    kernel: KernelMaps,
    libraries: Vec<String>,
    records: u64,
    malformed: u64,
    /// Processes found gone while the kernel still counted memory for them
    /// (their exit's program run was skipped), released by the agent.
    missed_exits: u64,
    reported_missed_exits: u64,
    reported: Stats,
    reported_malformed: u64,
}

impl Agent {
    pub fn new(sink: Box<dyn Sink>, kernel: KernelMaps, libraries: Vec<String>) -> Self {
        Self {
            ledger: Ledger::default(),
            cgroups: CgroupResolver::new(),
            procs: Processes::default(),
            limit_names: HashMap::new(),
            limits: None,
            carried: Carried::default(),
            devices: Devices::open(),
            sink,
            kernel,
            libraries,
            records: 0,
            malformed: 0,
            missed_exits: 0,
            reported_missed_exits: 0,
            reported: Stats::default(),
            reported_malformed: 0,
        }
    }

    /// Names the installed limit rules (by slot) for `limit` records.
    /// The kernel's usage maps.
    pub fn kernel(&self) -> &KernelMaps {
        &self.kernel
    }

    pub fn set_limits(&mut self, names: HashMap<u32, (String, Action)>) {
        self.limit_names = names;
    }

    fn on_limit(&mut self, rec: &EventRecord) -> io::Result<()> {
        let slot = rec.addr as u32;
        let (limit, rule_action) =
            self.limit_names.get(&slot).cloned().unwrap_or_else(|| (format!("slot {slot}"), Action::Audit));
        let action = match (rec.event, rec.result) {
            (event_type::LIMIT_SOFT, _) => rule_action.to_string(),
            (_, gpumem_common::limit_action::AUDIT) => "audit".into(),
            (_, gpumem_common::limit_action::SIGNAL) => format!("signal:{}", rec.flags),
            _ => "deny".into(),
        };
        let (cgroup, _) = self.cgroup_info(rec.cgroup_id);
        let line = LimitLine {
            caller: Caller::new(rec, event_type::name(rec.event), gpumem_common::id::name(rec.api), cgroup),
            limit,
            limit_bytes: rec.cgroup_total,
            usage: rec.proc_total,
            request: rec.size,
            action,
        };
        self.sink.write(&Line::Limit(line))
    }

    /// A library attached after start-up.
    pub fn add_library(&mut self, path: String) {
        self.libraries.push(path);
    }

    /// Installs the limit table, with the rules of start-up in it.
    pub fn set_limit_table(&mut self, table: LimitTable) {
        self.limit_names = table.names();
        self.limits = Some(table);
    }

    /// Sets a limit at run time (see `LimitTable::set`); a new target's
    /// live allocations are carried in its base until freed.
    pub fn set_limit(&mut self, limit: &Limit) -> Result<Installed, LimitError> {
        let table = self.limits.as_mut().ok_or(LimitError::NoTable)?;
        let m = table.matcher(&limit.target, limit.device);
        let entries: Vec<Entry> = self
            .ledger
            .live_allocations()
            .into_iter()
            .filter(|a| m.covers(a.tgid, a.comm, a.cgroup_id, a.device))
            .map(|a| (a.tgid, a.key, a.size))
            .collect();
        let total = entries.iter().map(|e| e.2).sum();
        let (installed, new) = table.set(limit, total)?;
        if new {
            self.carried.carry(installed.slot, &entries);
        }
        self.limit_names = table.names();
        Ok(installed)
    }

    /// Takes the limit on `target` out of force.
    pub fn clear_limit(&mut self, target: &Target) -> Result<Installed, LimitError> {
        let table = self.limits.as_mut().ok_or(LimitError::NoTable)?;
        let installed = table.clear(target)?;
        self.carried.drop_slot(installed.slot);
        table.write_base(installed.slot, 0)?;
        self.limit_names = table.names();
        Ok(installed)
    }

    /// Carried memory freed or gone with its process: lower the bases.
    fn carry_on(&mut self, rec: &EventRecord) {
        let tgid = rec.tgid();
        let changed = match rec.event {
            // An allocation at a carried address replaces one whose free
            // was never seen, as the kernel treats it.
            event_type::ALLOC => self.carried.freed(tgid, (ns::for_kind(rec.kind), rec.addr)),
            event_type::FREE if rec.flags & FLAG_UNTRACKED == 0 => {
                self.carried.freed(tgid, (ns::for_kind(rec.kind), rec.addr))
            }
            event_type::EXIT | event_type::EXEC => self.carried.exited(tgid),
            _ => return,
        };
        if let Some(table) = self.limits.as_mut() {
            for (slot, base) in changed {
                if let Err(e) = table.write_base(slot, base) {
                    eprintln!("gpumem: {e:#}");
                }
            }
        }
    }

    /// Handles one ring-buffer item.
    pub fn on_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(rec) = EventRecord::from_bytes(bytes) else {
            self.malformed += 1;
            return Ok(());
        };
        self.records += 1;
        if rec.event == event_type::LIMIT || rec.event == event_type::LIMIT_SOFT {
            return self.on_limit(&rec);
        }
        self.ledger.apply(&rec);
        self.carry_on(&rec);
        if rec.event == event_type::EXIT || rec.event == event_type::EXEC {
            self.procs.forget(rec.tgid());
        }
        let (path, container) = self.cgroup_info(rec.cgroup_id);
        self.sink.write(&Line::Event(EventLine::new(&rec, path, container)))
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }

    /// Releases every process the kernel still counts memory for but that
    /// no longer exists: the kernel skipped its exit. Its `exit` record
    /// comes through the ring buffer as a normal one would.
    fn release_gone(&mut self) {
        for tgid in self.kernel.processes().into_keys() {
            if !std::path::Path::new(&format!("/proc/{tgid}")).exists() && self.kernel.release_gone(tgid) {
                self.missed_exits += 1;
            }
        }
    }

    /// Writes a `dropped` line when any kernel counter moved.
    pub fn check_stats(&mut self) -> io::Result<()> {
        let now = self.kernel.stats();
        self.release_gone();
        if now == self.reported
            && self.malformed == self.reported_malformed
            && self.missed_exits == self.reported_missed_exits
        {
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
            skipped_runs: now.skipped_runs,
            malformed: self.malformed,
            missed_exits: self.missed_exits,
        };
        self.reported_missed_exits = self.missed_exits;
        self.reported = now;
        self.reported_malformed = self.malformed;
        self.sink.write(&Line::Dropped(line))?;
        self.sink.flush()
    }

    /// Writes a `usage` line for every process and cgroup holding memory.
    pub fn write_usage(&mut self) -> io::Result<()> {
        let ts_ns = monotonic_ns();
        let report = self.status();
        for (scope, entries) in [("process", report.processes), ("cgroup", report.cgroups)] {
            for entry in entries.into_iter().filter(|e| e.bytes != 0 || e.kernel_bytes != 0) {
                self.sink.write(&Line::Usage(UsageLine { ts_ns, event: "usage", scope, entry }))?;
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
                bytes: p.usage.bytes,
                kernel_bytes: kprocs.get(&pid).copied().unwrap_or(0),
                split: UsageLine::split(&p.usage),
                ..StatusEntry::default()
            });
        }
        for (&pid, &kernel_bytes) in &kprocs {
            if self.ledger.process(pid).is_none() {
                processes.push(StatusEntry { pid: Some(pid), kernel_bytes, ..StatusEntry::default() });
            }
        }
        let mut cgroups = Vec::new();
        for (id, u) in self.ledger.cgroups() {
            cgroups.push(StatusEntry {
                cgroup_id: id,
                bytes: u.bytes,
                kernel_bytes: kcgroups.get(&id).copied().unwrap_or(0),
                split: UsageLine::split(u),
                ..StatusEntry::default()
            });
        }
        for (&id, &kernel_bytes) in &kcgroups {
            if kernel_bytes != 0 && self.ledger.cgroup(id).is_none() {
                cgroups.push(StatusEntry { cgroup_id: id, kernel_bytes, ..StatusEntry::default() });
            }
        }
        for e in processes.iter_mut().chain(cgroups.iter_mut()) {
            (e.cgroup, e.container) = self.cgroup_info(e.cgroup_id);
            if let Some(pid) = e.pid {
                let info = self.procs.get(pid);
                (e.exe, e.cmdline) = (info.exe, info.cmdline);
            }
        }
        StatusReport {
            libraries: self.libraries.clone(),
            devices: self.devices.snapshot(),
            nvml: self.devices.available(),
            processes,
            cgroups,
            records: self.records,
            dropped: self.kernel.stats().ringbuf_drops,
            late_records: self.ledger.late_records(),
        }
    }

    /// A cgroup's path and the container it names.
    fn cgroup_info(&mut self, id: u64) -> (Option<String>, Option<Container>) {
        let path = self.cgroups.path(id);
        let container = path.as_deref().and_then(container::parse);
        (path, container)
    }
}
