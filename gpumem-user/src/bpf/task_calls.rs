//! Whether the programs keep calls in flight in task storage (the eBPF
//! crate's account/pending.rs, `TASK_CALLS_ON`): where the kernel has BTF,
//! which the storage's helpers need for their task type, unless
//! `GPUMEM_TASK_CALLS=off` keeps every call in the `PENDING` hash map (the
//! fallback, forced: how the bench measures what task storage saves, and
//! how a test runs the fallback on a kernel that has BTF). The records'
//! comm is read in place from the task only where this says yes, and
//! through the helper where it says no (`bpf/object.rs`).
use std::path::Path;

/// The kernel's own BTF.
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Whether calls in flight go to task storage, and if not, why not.
pub fn chosen() -> Result<(), String> {
    decide(std::env::var_os("GPUMEM_TASK_CALLS").as_deref().and_then(|v| v.to_str()), Path::new(VMLINUX_BTF))
}

fn decide(setting: Option<&str>, btf: &Path) -> Result<(), String> {
    match setting {
        Some("off") => return Err("GPUMEM_TASK_CALLS=off".into()),
        None | Some("on" | "") => {}
        Some(other) => {
            tracing::warn!("GPUMEM_TASK_CALLS={other:?} is neither on nor off: taken as on");
        }
    }
    if !btf.exists() {
        return Err(format!("the kernel has no BTF ({} is missing)", btf.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::decide;

    #[test]
    fn on_where_the_kernel_has_btf_unless_turned_off() {
        let dir = tempfile::tempdir().expect("tempdir");
        let btf = dir.path().join("vmlinux");
        assert!(decide(None, &btf).unwrap_err().contains("no BTF"));
        std::fs::write(&btf, b"").unwrap();
        assert_eq!(decide(None, &btf), Ok(()));
        assert_eq!(decide(Some("on"), &btf), Ok(()));
        assert_eq!(decide(Some("odd"), &btf), Ok(()));
        assert_eq!(decide(Some("off"), &btf), Err("GPUMEM_TASK_CALLS=off".into()));
    }
}
