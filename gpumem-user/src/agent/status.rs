//! The usage table, the ledger's view beside the kernel's, for `status`
//! answers and `usage` lines.
use std::{io, sync::Arc};

use super::Agent;
use crate::output::{monotonic_ns, Line, Scope, SplitLine, StatusEntry, StatusReport, UsageEvent, UsageLine};

impl Agent {
    /// The usage table: the ledger's view beside the kernel's, for every
    /// process and cgroup either of them knows.
    pub fn status(&mut self) -> StatusReport {
        let mut processes = self.process_entries();
        let kernel_cgroups = self.kernel.cgroups();
        let mut cgroups = self.cgroup_entries(&kernel_cgroups);
        for e in processes.iter_mut().chain(cgroups.iter_mut()) {
            let (cgroup, container) = self.enricher.cgroup(e.cgroup_id);
            (e.cgroup, e.container) =
                (cgroup.as_deref().map(str::to_string), container.map(Arc::unwrap_or_clone));
            if let Some(pid) = e.pid {
                let info = self.enricher.process(pid);
                (e.exe, e.cmdline) = (info.exe, info.cmdline);
            }
        }
        let stats = self.kernel.stats();
        let (idle, idle_wakes) = self.health.idle();
        StatusReport {
            libraries: self.libraries.clone(),
            libcuda_attached: self.libraries.iter().any(|p| {
                crate::bpf::discover::kind_of(std::path::Path::new(p))
                    == Some(gpumem_common::api::Library::Cuda)
            }),
            devices: self.devices.snapshot(),
            nvml: self.devices.available(),
            processes,
            cgroups,
            records: self.health.records(),
            dropped: stats.ringbuf_drops,
            late_records: self.ledger.late_records(),
            skipped_runs: stats.skipped_runs,
            unmatched_returns: stats.unmatched_returns,
            unwritten: self.sink.lost(),
            view_rewrites: stats.view_rewrites,
            live_slots_reclaimed: self.health.reclaim.emptied(),
            live_spilled: self.kernel.spilled(),
            live_entries_forgotten: self.health.reclaim.forgotten().live,
            vmm_mappings_forgotten: self.health.reclaim.forgotten().mappings,
            cgroup_entries: kernel_cgroups.len() as u64,
            cgroup_entries_forgotten: self.health.reclaim.forgotten().cgroups,
            released_entries: self.kernel.released_entries(),
            idle,
            idle_wakes,
            ring_unread_bytes: self.health.ring_unread,
        }
    }

    fn process_entries(&self) -> Vec<StatusEntry> {
        let kernel = self.kernel.processes();
        let mut entries: Vec<StatusEntry> = self
            .ledger
            .processes()
            .into_iter()
            .map(|(pid, p)| StatusEntry {
                pid: Some(pid),
                comm: Some(p.comm.clone()),
                cgroup_id: p.cgroup_id,
                bytes: p.usage.bytes,
                kernel_bytes: kernel.get(&pid).copied().unwrap_or(0),
                split: SplitLine::of(&p.usage),
                ..StatusEntry::default()
            })
            .collect();
        for (&pid, &kernel_bytes) in &kernel {
            if self.ledger.process(pid).is_none() {
                entries.push(StatusEntry { pid: Some(pid), kernel_bytes, ..StatusEntry::default() });
            }
        }
        entries
    }

    /// `kernel`: the kernel's totals by cgroup id.
    fn cgroup_entries(&self, kernel: &std::collections::HashMap<u64, u64>) -> Vec<StatusEntry> {
        let mut entries: Vec<StatusEntry> = self
            .ledger
            .cgroups()
            .into_iter()
            .map(|(id, u)| StatusEntry {
                cgroup_id: id,
                bytes: u.bytes,
                kernel_bytes: kernel.get(&id).copied().unwrap_or(0),
                split: SplitLine::of(u),
                ..StatusEntry::default()
            })
            .collect();
        for (&id, &kernel_bytes) in kernel {
            if kernel_bytes != 0 && self.ledger.cgroup(id).is_none() {
                entries.push(StatusEntry { cgroup_id: id, kernel_bytes, ..StatusEntry::default() });
            }
        }
        entries
    }

    /// Writes a `usage` line for every process and cgroup holding memory.
    pub fn write_usage(&mut self) -> io::Result<()> {
        let ts_ns = monotonic_ns();
        let report = self.status();
        for (scope, entries) in [(Scope::Process, report.processes), (Scope::Cgroup, report.cgroups)] {
            for entry in entries.into_iter().filter(|e| e.bytes != 0 || e.kernel_bytes != 0) {
                let line = UsageLine { ts_ns, event: UsageEvent::Usage, scope, entry };
                self.sink.write(&Line::Usage(line))?;
            }
        }
        self.sink.flush()
    }
}
