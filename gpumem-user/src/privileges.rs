//! Refusing to start without the privileges eBPF needs, and saying which.

/// Linux capability numbers.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Debug, thiserror::Error)]
#[error(
    "gpumem run needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to load eBPF programs and attach \
     uprobes, and this process has {have}; run it as root (sudo gpumem run ...)"
)]
pub struct MissingPrivileges {
    have: String,
}

/// The effective capability set from a `/proc/self/status` text.
pub fn effective_caps(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Whether a capability set can load and attach gpumem's programs.
pub fn sufficient(caps: u64) -> bool {
    let has = |c: u32| caps & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

pub fn check() -> Result<(), MissingPrivileges> {
    let caps = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| effective_caps(&s));
    match caps {
        Some(c) if sufficient(c) => Ok(()),
        Some(c) => Err(MissingPrivileges { have: format!("effective capabilities {c:#x}") }),
        None => Err(MissingPrivileges { have: "no readable capability set".into() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_capeff_and_judges_it() {
        let status = "Name:\tgpumem\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let caps = effective_caps(status).unwrap();
        assert!(sufficient(caps));
        assert!(!sufficient(0));
        assert!(sufficient((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(!sufficient(1 << CAP_BPF));
        assert_eq!(effective_caps("Name: x\n"), None);
    }
}
