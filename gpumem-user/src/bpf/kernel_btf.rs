//! The running kernel's BTF, read and parsed once per process: the
//! multi-link loader relocates the programs against it, and `ahead` reads
//! it while the agent searches for libraries.
use std::sync::OnceLock;

use aya::Btf;

/// The kernel's BTF (None where the kernel has none).
pub fn kernel_btf() -> Option<&'static Btf> {
    static BTF: OnceLock<Option<Btf>> = OnceLock::new();
    BTF.get_or_init(|| Btf::from_sys_fs().ok()).as_ref()
}
