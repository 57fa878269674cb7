//! The view program (`view=limit`): loaded apart from the others, since
//! the kernel refuses its helper under lockdown or without CAP_SYS_ADMIN,
//! and the agent runs on without it.
use aya::programs::UProbe;

use super::{probes, Tracer};

impl Tracer {
    /// Whether this kernel lets the program that answers memory queries
    /// with a limit's view write the caller's memory (what `view=limit`
    /// needs): None if it does (the program is loaded and its rows are
    /// attached), else why not. Known once the programs are loaded.
    pub fn view_refusal(&self) -> Option<&str> {
        self.view_refusal.as_deref()
    }

    /// Loads the view program, which the kernel refuses under lockdown or
    /// without CAP_SYS_ADMIN: None if it loaded, else the reason.
    pub(super) fn load_view(&mut self) -> Option<String> {
        let name = probes::VIEW_RETURN;
        let loaded = match &mut self.multi {
            Some(multi) => multi.add(name).map_err(|e| e.to_string()),
            None => match self.ebpf.program_mut(name).map(<&mut UProbe>::try_from) {
                Some(Ok(p)) => p.load().map_err(|e| format!("{e:#}")),
                _ => return Some(format!("the eBPF object has no program `{name}`")),
            },
        };
        let text = match loaded {
            Ok(()) => return None,
            Err(text) => text,
        };
        if !text.contains("bpf_probe_write_user") {
            // Not the kernel's refusal of the helper: gpumem's own fault.
            tracing::warn!(
                "loading the view program failed for another reason than the kernel's refusal: {text}"
            );
            return Some(format!(
                "the view program did not load: {}",
                text.lines().next().unwrap_or("load failed")
            ));
        }
        let lockdown = std::fs::read_to_string("/sys/kernel/security/lockdown").ok();
        let lockdown = lockdown.as_deref().map_or(String::new(), |l| format!("; lockdown: {}", l.trim()));
        Some(format!(
            "the kernel refuses bpf_probe_write_user to uprobe programs (kernel lockdown, or the agent lacks \
             CAP_SYS_ADMIN){lockdown}"
        ))
    }
}
