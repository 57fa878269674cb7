//! The bpf links a process holds (from /proc/PID/fdinfo) and whether the
//! kernel still has a link (`BPF_LINK_GET_FD_BY_ID`).
use std::fs;

/// One bpf link descriptor of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfLink {
    pub id: u32,
    /// The kernel's `link_type` (`uprobe_multi`, `uretprobe_multi`,
    /// `perf_event`, `raw_tracepoint`, ...).
    pub kind: String,
    /// Probes a multi-uprobe link holds (`uprobe_cnt`, which older
    /// kernels, 6.12 among them, do not show); 1 for other links.
    pub probes: Option<usize>,
}

impl BpfLink {
    pub fn is_multi_uprobe(&self) -> bool {
        matches!(self.kind.as_str(), "uprobe_multi" | "uretprobe_multi")
    }
}

/// Parses one descriptor's fdinfo; None if it is no bpf link.
fn parse(info: &str) -> Option<BpfLink> {
    let field =
        |name: &str| info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim));
    Some(BpfLink {
        id: field("link_id")?.parse().ok()?,
        kind: field("link_type")?.to_string(),
        probes: match field("uprobe_cnt") {
            Some(n) => n.parse().ok(),
            None if info.contains("uprobe_multi") => None,
            None => Some(1),
        },
    })
}

/// Every bpf link `pid` holds a descriptor of.
pub fn links_of(pid: u32) -> Vec<BpfLink> {
    let dir = format!("/proc/{pid}/fdinfo");
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {dir}: {e}"));
    entries.filter_map(|e| fs::read_to_string(e.ok()?.path()).ok()).filter_map(|i| parse(&i)).collect()
}

/// Whether the kernel still has link `id`.
pub fn link_exists(id: u32) -> bool {
    // bpf_attr for BPF_LINK_GET_FD_BY_ID: link_id, next_id, open_flags.
    let mut attr = [0u32; 4];
    attr[0] = id;
    const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
    // SAFETY: `attr` is large enough for the command's fields and lives
    // across the call.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_LINK_GET_FD_BY_ID, attr.as_mut_ptr(), std::mem::size_of_val(&attr))
    };
    if fd >= 0 {
        // SAFETY: the kernel just gave us this descriptor.
        unsafe { libc::close(fd as i32) };
        return true;
    }
    let err = std::io::Error::last_os_error();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "asking the kernel for link {id}: {err}");
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn fdinfo_of_links_is_read_and_others_are_not() {
        let multi = "pos:\t0\nflags:\t02000000\nlink_type:\turetprobe_multi\nlink_id:\t160925\nprog_id:\t240224\nuprobe_cnt:\t3\npath:\t/x\n";
        assert_eq!(
            super::parse(multi),
            Some(super::BpfLink { id: 160925, kind: "uretprobe_multi".into(), probes: Some(3) })
        );
        assert!(super::parse(multi).unwrap().is_multi_uprobe());
        let perf = "link_type:\tperf_event\nlink_id:\t7\nprog_id:\t9\n";
        assert_eq!(super::parse(perf).map(|l| (l.id, l.probes)), Some((7, Some(1))));
        let older = "link_type:\tuprobe_multi\nlink_id:\t8\nprog_id:\t9\n";
        assert_eq!(super::parse(older).map(|l| l.probes), Some(None), "6.12 does not count them");
        assert_eq!(super::parse("pos:\t0\nflags:\t02\nmap_type:\t1\n"), None);
    }
}
