//! `cargo xtask image`: the agent's OCI image, built from what these
//! machines reach, with no registry and no base image to pull. Its root
//! holds only what the agent needs, each file the host's own (Debian's
//! packages): the release binary; the C library, libm, libgcc_s and the
//! loader it links (found with `ldd`); `ldconfig` (static), which the agent
//! asks where a libcuda is; procps's `pkill` and what it links (the
//! DaemonSet's reload command, as the Debian-based Dockerfile has it); and
//! busybox (static, Debian's busybox-static) for a shell to look around
//! with. Built with podman from a
//! Containerfile `FROM scratch`, tagged `gpumem:VERSION` and
//! `gpumem:VERSION-COMMIT`; its size is printed. `deploy/container/Dockerfile`
//! builds the same agent on Debian's base image where a registry is
//! reachable.
//!
//! For the test of an upgrade between two images, [`upgrade_pair`] also
//! builds a second image of another build: the same source with a build
//! note in its eBPF object (gpumem-ebpf's `BUILD_NOTE`), so its agent takes
//! the first's pinned state over as a newer release would.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context};

use crate::{
    artifacts::build_profile,
    setup::setup,
    util::{cmd, ensure_tool, output, root, run, target_dir},
};

/// What was built.
pub struct Image {
    /// `gpumem:VERSION-COMMIT`.
    pub tag: String,
    /// The image saved as an OCI archive, for a podman of other storage
    /// (the tests') to load.
    pub archive: PathBuf,
}

/// `cargo xtask image`.
pub fn image() -> anyhow::Result<Image> {
    image_of("release")
}

/// The image of the agent built in Cargo profile `profile`.
fn image_of(profile: &str) -> anyhow::Result<Image> {
    let built = build_profile(profile)?;
    assemble(&built.agent, None)
}

/// The image of this source, and one of another build (`-next` tagged): the
/// same code with the eBPF object's build note `next`; both of the agent
/// built in Cargo profile `profile` (`cargo xtask image --next`: release;
/// `cargo xtask test`: the kernel matrix's, optimised with debug
/// assertions, which that run builds anyway: a release build's
/// dependencies cost it five minutes more). The noted build comes first,
/// so the agent left in the profile's directory is the plain one.
pub fn upgrade_pair(profile: &str) -> anyhow::Result<(Image, Image)> {
    let noted = noted_agent(profile)?;
    pair(&build_profile(profile)?.agent, &noted)
}

/// Builds the agent with the build note `next` in Cargo profile `profile`
/// and keeps it (target/image-next.gpumem): its path. The profile's
/// directory then holds the noted agent until the next plain build, which
/// recompiles the agent's crate (about 100 s in the matrix's profile):
/// `cargo xtask test` makes it first, before its own build.
pub fn noted_agent(profile: &str) -> anyhow::Result<PathBuf> {
    setup()?;
    run(cmd("cargo")
        .current_dir(root())
        .args(["build", "-p", "gpumem-user", "--bin", "gpumem"])
        .args(crate::artifacts::profile_args(profile))
        .env("GPUMEM_BUILD_NOTE", NEXT))
    .context("building the agent with the build note")?;
    let noted = target_dir().join("image-next.gpumem");
    fs::copy(target_dir().join(profile).join("gpumem"), &noted)
        .with_context(|| format!("keeping the noted agent as {}", noted.display()))?;
    Ok(noted)
}

/// The images of `agent` and of the `noted` agent ([`noted_agent`]).
pub fn pair(agent: &Path, noted: &Path) -> anyhow::Result<(Image, Image)> {
    let next = assemble(noted, Some(NEXT))?;
    Ok((assemble(agent, None)?, next))
}

/// The build note of [`upgrade_pair`]'s second image.
const NEXT: &str = "next";

/// The image of `agent` in target/image (target/image-NOTE for a noted
/// build, tagged `...-NOTE`).
fn assemble(agent_file: &Path, note: Option<&str>) -> anyhow::Result<Image> {
    let podman = ensure_tool("podman", "podman")?;
    let busybox = ensure_tool("busybox", "busybox-static")?;
    let dir = target_dir().join(note.map_or("image".to_string(), |n| format!("image-{n}")));
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let rootfs = dir.join("rootfs");
    let agent = rootfs.join("usr/local/bin/gpumem");
    place(agent_file, &agent)?;
    let strip = ensure_tool("strip", "binutils")?;
    run(cmd(strip).arg("--strip-debug").arg(&agent))?;
    for lib in linked(agent_file)? {
        place(&lib, &rootfs.join(lib.strip_prefix("/").unwrap_or(&lib)))?;
    }
    place(Path::new("/sbin/ldconfig"), &rootfs.join("sbin/ldconfig"))?;
    let pkill = ensure_tool("pkill", "procps")?;
    place(&pkill, &rootfs.join("usr/bin/pkill"))?;
    for lib in linked(&pkill)? {
        place(&lib, &rootfs.join(lib.strip_prefix("/").unwrap_or(&lib)))?;
    }
    place(&busybox, &rootfs.join("bin/busybox"))?;
    for applet in ["sh", "cat", "ls", "ps"] {
        std::os::unix::fs::symlink("/bin/busybox", rootfs.join("bin").join(applet))
            .with_context(|| format!("linking {applet}"))?;
    }
    // The agent's socket directory and the mounts' points; /tmp for nothing
    // but good manners (the root file system is read-only in the pod).
    for d in ["run/gpumem", "etc/gpumem", "tmp", "proc", "sys", "dev"] {
        fs::create_dir_all(rootfs.join(d))?;
    }
    let version = version()?;
    let commit = commit()? + &note.map(|n| format!("-{n}")).unwrap_or_default();
    fs::write(dir.join("Containerfile"), containerfile(&version, &commit))?;
    let tag = format!("gpumem:{version}-{commit}");
    // gpumem:VERSION names the plain build's image only.
    let tags = [tag.clone()].into_iter().chain(note.is_none().then(|| format!("gpumem:{version}")));
    output(
        cmd(&podman)
            .args(["build", "--quiet", "--no-cache"])
            .args(tags.flat_map(|t| ["-t".to_string(), t]))
            .arg("-f")
            .arg(dir.join("Containerfile"))
            .arg(&dir),
    )
    .context("building the image with podman")?;
    let size = output(cmd(&podman).args(["image", "inspect", "--format", "{{.Size}}", &tag]))?;
    let bytes: u64 = size.trim().parse().with_context(|| format!("podman said the size is `{size}`"))?;
    let archive = dir.join(format!("gpumem-{version}-{commit}.tar"));
    run(cmd(&podman).args(["save", "--quiet", "--format", "oci-archive", "-o"]).arg(&archive).arg(&tag))
        .context("saving the image")?;
    let also = if note.is_none() { format!(" (also gpumem:{version})") } else { String::new() };
    println!("{tag}{also}: {:.1} MiB; saved as {}", bytes as f64 / (1 << 20) as f64, archive.display());
    Ok(Image { tag, archive })
}

fn containerfile(version: &str, commit: &str) -> String {
    format!(
        "# Written by `cargo xtask image`: the agent and the files it needs, no base image.\n\
         FROM scratch\n\
         COPY rootfs/ /\n\
         LABEL org.opencontainers.image.title=gpumem \\\n      \
         org.opencontainers.image.version={version} \\\n      \
         org.opencontainers.image.revision={commit}\n\
         USER 0\n\
         ENTRYPOINT [\"/usr/local/bin/gpumem\"]\n\
         CMD [\"run\"]\n"
    )
}

/// Copies `from` (the file a link leads to) to `to`, making its directory.
fn place(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to.parent().unwrap_or(Path::new("/")))?;
    fs::copy(from, to).with_context(|| format!("copying {} into the image", from.display()))?;
    Ok(())
}

/// The shared libraries `binary` links, and its loader, as `ldd` says.
fn linked(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let text = output(cmd("ldd").arg(binary))?;
    let libs = parse_ldd(&text);
    if !libs.iter().any(|l| l.to_string_lossy().contains("ld-linux")) {
        bail!("ldd named no loader for {}:\n{text}", binary.display());
    }
    Ok(libs)
}

/// The paths of `ldd`'s lines (`libc.so.6 => /lib/... (0x...)`, or the
/// loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`); the vDSO has none.
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = l.split_once("=>").map_or(l, |(_, p)| p.trim());
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The agent's version, the workspace's (`cargo xtask` is built with
/// the same manifest).
fn version() -> anyhow::Result<String> {
    let manifest = fs::read_to_string(root().join("Cargo.toml"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = ").map(|v| v.trim_matches('"').to_string()))
        .context("no workspace version in Cargo.toml")
}

/// The commit, short, `-dirty` where the tree has changes.
fn commit() -> anyhow::Result<String> {
    let head = output(cmd("git").current_dir(root()).args(["rev-parse", "--short=12", "HEAD"]))?;
    let dirty =
        !output(cmd("git").current_dir(root()).args(["status", "--porcelain", "--untracked-files=no"]))?
            .trim()
            .is_empty();
    Ok(format!("{}{}", head.trim(), if dirty { "-dirty" } else { "" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_give_their_files() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x7f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }
}
