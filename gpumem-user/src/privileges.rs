//! Refusing to start without the privileges eBPF needs, and saying which.
use caps::{CapSet, Capability, CapsHashSet};

#[derive(Debug, thiserror::Error)]
#[error(
    "gpumem run needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to load eBPF programs and attach \
     uprobes, and this process has {have}; run it as root (sudo gpumem run ...)"
)]
pub struct MissingPrivileges {
    have: String,
}

/// Whether a capability set can load and attach gpumem's programs.
pub fn sufficient(caps: &CapsHashSet) -> bool {
    caps.contains(&Capability::CAP_SYS_ADMIN)
        || (caps.contains(&Capability::CAP_BPF) && caps.contains(&Capability::CAP_PERFMON))
}

pub fn check() -> Result<(), MissingPrivileges> {
    match caps::read(None, CapSet::Effective) {
        Ok(c) if sufficient(&c) => Ok(()),
        Ok(c) => {
            let mut names: Vec<String> = c.iter().map(ToString::to_string).collect();
            names.sort();
            let have = if names.is_empty() { "no capabilities".into() } else { names.join(", ") };
            Err(MissingPrivileges { have })
        }
        Err(e) => Err(MissingPrivileges { have: format!("no readable capability set ({e})") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_capability_sets() {
        let set = |c: &[Capability]| c.iter().copied().collect::<CapsHashSet>();
        assert!(sufficient(&caps::all()));
        assert!(!sufficient(&set(&[])));
        assert!(sufficient(&set(&[Capability::CAP_BPF, Capability::CAP_PERFMON])));
        assert!(sufficient(&set(&[Capability::CAP_SYS_ADMIN])));
        assert!(!sufficient(&set(&[Capability::CAP_BPF])));
    }
}
