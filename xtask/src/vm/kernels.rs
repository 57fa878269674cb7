//! The kernel matrix: stock Debian cloud kernels, fetched as packages
//! through a private apt configuration (the host's own sources are left
//! alone) and cached under `~/.cache/gpumem/kernels/<series>/`.
use std::{fs, path::PathBuf, process::Command};

use anyhow::bail;

use crate::{
    apt::{version_key, Apt},
    util::{cache_dir, run},
};

/// One column of the matrix: the newest cloud kernel whose package name
/// matches `pattern` (an apt-cache regular expression).
pub struct Series {
    pub name: &'static str,
    pattern: &'static str,
    /// QEMU's CPU model for it. QEMU 7.2's TCG has quirks that differ by
    /// kernel: 6.12 takes a general protection fault in do_sync_core at
    /// boot with qemu64; with max, a 6.12 guest once took a double fault
    /// in the slab allocator's cmpxchg16b.
    pub cpu: &'static str,
    /// Added to the guest kernel's command line.
    pub args: &'static str,
}

/// QEMU's qemu64 with what x86-64-v2 adds that the real clients need
/// (numpy 2's wheels are built for SSE4.2 and POPCNT; on plain qemu64 their
/// import dies of an invalid opcode).
const QEMU64_V2: &str = "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt";

pub const MATRIX: &[Series] = &[
    Series {
        name: "6.1",
        pattern: r"^linux-image-6\.1\.[0-9]+-[0-9]+-cloud-amd64$",
        cpu: QEMU64_V2,
        args: "",
    },
    // 6.12 under max: numpy's X86_V2 baseline wants CMPXCHG16B in CPUID,
    // but the kernel's own this_cpu cmpxchg16b (SLUB) double-faults under
    // QEMU 7.2's TCG, so the kernel is told to leave it alone.
    Series {
        name: "6.12",
        pattern: r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64$",
        cpu: "max",
        args: "clearcpuid=cx16",
    },
    Series {
        name: "6.18",
        pattern: r"^linux-image-6\.18\.[0-9]+\+deb13-cloud-amd64$",
        cpu: QEMU64_V2,
        args: "",
    },
    // sid's own kernels carry the next release's suffix (+deb14 for forky).
    Series { name: "sid", pattern: r"^linux-image-[0-9.]+\+deb14-cloud-amd64$", cpu: QEMU64_V2, args: "" },
];

/// Tests that fail on kernels whose release starts with the prefix, for a
/// reason not yet fixed: the guest says SKIPPED with the reason instead of
/// running them. (release prefix, test name, reason.)
pub const KNOWN_FAILURES: &[(&str, &str, &str)] = &[];

/// The columns' names.
pub fn columns() -> Vec<&'static str> {
    MATRIX.iter().map(|s| s.name).collect()
}

/// A kernel ready to boot.
pub struct Kernel {
    pub series: &'static str,
    pub cpu: &'static str,
    pub args: &'static str,
    /// The package's kernel release, e.g. `6.1.0-50-cloud-amd64`.
    pub release: String,
    pub vmlinuz: PathBuf,
}

/// The suites the matrix draws on, beside the host's bookworm.
const SUITES: &[&str] = &["bookworm", "bookworm-backports", "trixie-backports", "sid"];

/// gpumem's own apt configuration for the kernels.
fn apt() -> anyhow::Result<Apt> {
    let sources: Vec<(&str, &str)> = SUITES.iter().map(|s| (*s, "main")).collect();
    Apt::new("apt", &sources)
}

/// The newest of `names`.
fn newest(names: &[String]) -> Option<&String> {
    names.iter().max_by_key(|n| version_key(n))
}

/// `linux-image-R` -> `R`, the kernel release.
fn release_of(package: &str) -> &str {
    package.strip_prefix("linux-image-").unwrap_or(package)
}

/// Every kernel of the matrix, from the cache or fetched into it.
pub fn kernels() -> anyhow::Result<Vec<Kernel>> {
    let root = cache_dir().join("kernels");
    let cached = |s: &Series| -> Option<Kernel> {
        let dir = root.join(s.name);
        let release = fs::read_to_string(dir.join("release")).ok()?.trim().to_string();
        let vmlinuz = dir.join("vmlinuz");
        vmlinuz.exists().then_some(Kernel { series: s.name, cpu: s.cpu, args: s.args, release, vmlinuz })
    };
    if let Some(all) = MATRIX.iter().map(cached).collect::<Option<Vec<_>>>() {
        return Ok(all);
    }
    let apt = apt()?;
    apt.update()?;
    let mut out = Vec::new();
    for s in MATRIX {
        if let Some(k) = cached(s) {
            out.push(k);
            continue;
        }
        let names = apt.search(s.pattern)?;
        let Some(package) = newest(&names) else {
            bail!("no kernel package matches {} in {SUITES:?} for the {} column", s.pattern, s.name);
        };
        let release = release_of(package).to_string();
        eprintln!("xtask: fetching kernel {release} for the {} column", s.name);
        let dir = root.join(s.name);
        let _ = fs::remove_dir_all(&dir);
        let work = dir.join("deb");
        fs::create_dir_all(&work)?;
        // Newer packages keep the image in linux-binary-*, older in the
        // image package itself.
        let binary = format!("linux-binary-{release}");
        let package =
            if apt.search(&format!("^{}$", binary.replace('.', r"\.").replace('+', r"\+")))?.is_empty() {
                package.clone()
            } else {
                binary
            };
        let deb = apt.download(&package, &work)?;
        let tree = work.join("tree");
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree))?;
        let candidates = [
            tree.join(format!("boot/vmlinuz-{release}")),
            tree.join(format!("usr/lib/modules/{release}/vmlinuz")),
        ];
        let Some(image) = candidates.iter().find(|p| p.exists()) else {
            bail!("{package} holds no kernel image at {candidates:?}");
        };
        fs::rename(image, dir.join("vmlinuz"))?;
        fs::remove_dir_all(&work)?;
        fs::write(dir.join("release"), &release)?;
        out.push(Kernel { series: s.name, cpu: s.cpu, args: s.args, release, vmlinuz: dir.join("vmlinuz") });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_compares_every_number_in_the_name() {
        let names: Vec<String> = [
            "linux-image-6.12.90+deb12.1-cloud-amd64",
            "linux-image-6.12.95+deb12-cloud-amd64",
            "linux-image-6.1.0-50-cloud-amd64",
            "linux-image-7.2.12+deb13-cloud-amd64",
            "linux-image-7.2.13+deb14-cloud-amd64",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(newest(&names).unwrap(), "linux-image-7.2.13+deb14-cloud-amd64");
        assert!(MATRIX.iter().any(|s| s.name == "sid"));
        assert_eq!(newest(&names[..2]).unwrap(), "linux-image-6.12.95+deb12-cloud-amd64");
        assert_eq!(release_of("linux-image-6.1.0-50-cloud-amd64"), "6.1.0-50-cloud-amd64");
    }
}
